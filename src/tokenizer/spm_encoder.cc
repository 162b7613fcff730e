#include "tokenizer/spm_encoder.h"

#include <queue>
#include <string>

#include "tokenizer/utf8.h"

namespace weir::tokenizer::internal {
namespace {

struct Symbol {
  int64_t prev;  // -1: none
  int64_t next;  // -1: none
  size_t start;  // byte offset in the normalized text
  size_t len;    // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int64_t left, right;  // symbol indices
  size_t len;           // bytes of the concatenation when the entry was made
};

// Orders the heap: higher score first, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

std::string MarkSpaces(std::string_view text, bool add_prefix) {
  std::string out;
  out.reserve(text.size() + text.size() / 2 + kSpaceMarker.size());
  if (add_prefix) out.append(kSpaceMarker);
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpaceMarker);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void EncodeSentencePiece(const Vocab& v, std::string_view text, std::vector<int32_t>* out) {
  if (text.empty()) return;
  const std::string norm = MarkSpaces(text, v.add_space_prefix);

  std::vector<Symbol> syms;
  syms.reserve(norm.size());
  for (size_t pos = 0; pos < norm.size();) {
    size_t len = Utf8UnitLength(norm, pos);
    int64_t i = static_cast<int64_t>(syms.size());
    syms.push_back({i - 1, i + 1, pos, len});
    pos += len;
  }
  syms.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> heap;
  auto try_add = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = syms[left];
    const Symbol& r = syms[right];
    std::string_view joined(norm.data() + l.start, l.len + r.len);
    int32_t id = v.Find(joined);
    if (id < 0) return;
    heap.push({v.scores[id], left, right, joined.size()});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int64_t>(i) - 1, i);

  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    Symbol& l = syms[b.left];
    Symbol& r = syms[b.right];
    // A symbol only grows by absorbing its right neighbour, so a changed length means the pair
    // this entry described no longer exists.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Symbol 0 is never absorbed (it has no left neighbour), so the list starts there.
  for (int64_t i = 0; i >= 0; i = syms[i].next) {
    std::string_view piece(norm.data() + syms[i].start, syms[i].len);
    int32_t id = v.Find(piece);
    if (id >= 0) {
      out->push_back(id);
    } else {
      AppendFallback(v, piece, out);
    }
  }
}

}  // namespace weir::tokenizer::internal
