#include "storage/lru_policy.h"

namespace weir::storage {

void LruPolicy::Init(uint32_t n_partitions) { lists_.assign(n_partitions, List{}); }

void LruPolicy::MakeEvictable(PolicyHook* h) {
  if (h->evictable) return;
  List& l = lists_[h->partition];
  h->prev = nullptr;
  h->next = l.head;
  if (l.head != nullptr) l.head->prev = h;
  l.head = h;
  if (l.tail == nullptr) l.tail = h;
  h->evictable = true;
}

void LruPolicy::MakeUnevictable(PolicyHook* h) {
  if (!h->evictable) return;
  List& l = lists_[h->partition];
  if (h->prev != nullptr) h->prev->next = h->next;
  else l.head = h->next;
  if (h->next != nullptr) h->next->prev = h->prev;
  else l.tail = h->prev;
  h->prev = h->next = nullptr;
  h->evictable = false;
}

PolicyHook* LruPolicy::PickVictim(uint32_t partition, bool force) {
  return lists_[partition].tail;
}

}  // namespace weir::storage
