#include "tokenizer/bpe_encoder.h"

#include <queue>
#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/spm_encoder.h"
#include "tokenizer/utf8.h"

namespace weir::tokenizer::internal {
namespace {

struct Candidate {
  int32_t rank;
  int64_t left;  // symbol index of the left side
  int32_t left_id, right_id;
  int32_t result;
};

// Orders the heap: lowest rank first, then the leftmost pair.
struct CandidateLess {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

void EncodeMarkedText(const Vocab& v, std::string_view text, std::vector<int32_t>* out) {
  const std::string norm = MarkSpaces(text, v.add_space_prefix);
  std::vector<int32_t> ids;
  ids.reserve(norm.size());
  bool last_was_unknown = false;
  for (size_t pos = 0; pos < norm.size();) {
    size_t len = Utf8UnitLength(norm, pos);
    std::string_view unit(norm.data() + pos, len);
    pos += len;
    if (int32_t id = v.Find(unit); id >= 0) {
      ids.push_back(id);
      last_was_unknown = false;
      continue;
    }
    std::vector<int32_t> fallback;
    bool is_unk = AppendFallback(v, unit, &fallback);
    if (!(is_unk && last_was_unknown)) ids.insert(ids.end(), fallback.begin(), fallback.end());
    last_was_unknown = is_unk;
  }
  ApplyRankedMerges(v, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
}

void EncodeByteLevel(const Vocab& v, std::string_view text, std::vector<int32_t>* out) {
  std::string prefixed;
  if (v.add_space_prefix) {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<int32_t> ids;
  std::string mapped;
  for (std::string_view word : v.splitter->Split(text)) {
    if (v.ignore_merges) {
      mapped.clear();
      for (char c : word) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(c)), &mapped);
      if (int32_t id = v.Find(mapped); id >= 0) {
        out->push_back(id);
        continue;
      }
    }
    ids.clear();
    for (char c : word) {
      int32_t id = v.byte_ids[static_cast<uint8_t>(c)];
      ids.push_back(id >= 0 ? id : v.unk_id);  // BuildVocab guarantees unk when a byte is missing
    }
    ApplyRankedMerges(v, &ids);
    out->insert(out->end(), ids.begin(), ids.end());
  }
}

}  // namespace

void ApplyRankedMerges(const Vocab& v, std::vector<int32_t>* ids) {
  const size_t n = ids->size();
  if (n < 2 || v.merges.empty()) return;
  struct Symbol {
    int32_t id;
    int64_t prev, next;  // -1: none
    bool alive;
  };
  std::vector<Symbol> syms(n);
  for (size_t i = 0; i < n; ++i) {
    syms[i] = {(*ids)[i], static_cast<int64_t>(i) - 1, static_cast<int64_t>(i) + 1, true};
  }
  syms[n - 1].next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateLess> heap;
  auto try_add = [&](int64_t left) {
    if (left < 0 || syms[left].next < 0) return;
    int32_t a = syms[left].id, b = syms[syms[left].next].id;
    auto it = v.merges.find(PairKey(a, b));
    if (it != v.merges.end()) heap.push({it->second.rank, left, a, b, it->second.result});
  };
  for (size_t i = 0; i + 1 < n; ++i) try_add(static_cast<int64_t>(i));

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = syms[c.left];
    if (!l.alive || l.next < 0 || l.id != c.left_id || syms[l.next].id != c.right_id) continue;
    Symbol& r = syms[l.next];
    l.id = c.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    try_add(l.prev);
    try_add(c.left);
  }

  ids->clear();
  for (int64_t i = 0; i >= 0; i = syms[i].next) ids->push_back(syms[i].id);
}

void EncodeBpeMerges(const Vocab& v, std::string_view text, std::vector<int32_t>* out) {
  if (text.empty()) return;
  if (v.byte_level) {
    EncodeByteLevel(v, text, out);
  } else {
    EncodeMarkedText(v, text, out);
  }
}

}  // namespace weir::tokenizer::internal
