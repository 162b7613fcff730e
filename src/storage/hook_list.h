// HookList: an intrusive doubly linked list of PolicyHooks (the links live in the hooks, so
// linking and unlinking are O(1) and allocate nothing). Head = most recently added.
//
// Thread safety: none; used by policies under the WeightCache mutex.
#pragma once

#include "storage/eviction_policy.h"

namespace weir::storage {

struct HookList {
  PolicyHook* head = nullptr;
  PolicyHook* tail = nullptr;

  bool empty() const { return head == nullptr; }

  void PushFront(PolicyHook* h) {
    h->prev = nullptr;
    h->next = head;
    if (head != nullptr) head->prev = h;
    head = h;
    if (tail == nullptr) tail = h;
  }

  void Unlink(PolicyHook* h) {
    if (h->prev != nullptr)
      h->prev->next = h->next;
    else
      head = h->next;
    if (h->next != nullptr)
      h->next->prev = h->prev;
    else
      tail = h->prev;
    h->prev = h->next = nullptr;
  }
};

}  // namespace weir::storage
