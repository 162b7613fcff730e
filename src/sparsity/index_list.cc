#include "sparsity/index_list.h"

#include <algorithm>

namespace weir::sparsity {

void IndexList::Reserve(int64_t capacity) {
  WEIR_CHECK(capacity >= 0);
  idx_.assign(static_cast<size_t>(capacity), 0);
  universe_ = 0;
  size_ = 0;
  all_ = false;
}

void IndexList::SetAll(int64_t universe) {
  WEIR_CHECK(universe >= 0);
  universe_ = universe;
  size_ = 0;
  all_ = true;
}

double IndexList::density() const {
  if (universe_ == 0) return 1.0;
  return static_cast<double>(size()) / static_cast<double>(universe_);
}

bool IndexList::Contains(int64_t index) const {
  if (index < 0 || index >= universe_) return false;
  if (all_) return true;
  auto span = indices();
  return std::binary_search(span.begin(), span.end(), static_cast<int32_t>(index));
}

void IndexList::Materialize() {
  if (!all_) return;
  WEIR_CHECK(universe_ <= capacity());
  for (int64_t i = 0; i < universe_; ++i) idx_[i] = static_cast<int32_t>(i);
  size_ = universe_;
  all_ = false;
}

void IndexList::CopyFrom(const IndexList& other) {
  if (other.all_) {
    SetAll(other.universe_);
    return;
  }
  WEIR_CHECK(other.size_ <= capacity());
  std::copy(other.idx_.begin(), other.idx_.begin() + other.size_, idx_.begin());
  universe_ = other.universe_;
  size_ = other.size_;
  all_ = false;
}

int32_t* IndexList::BeginWrite(int64_t universe) {
  WEIR_CHECK(universe >= 0 && universe <= capacity());
  universe_ = universe;
  size_ = 0;
  all_ = false;
  return idx_.data();
}

void IndexList::EndWrite(int64_t count) {
  WEIR_CHECK(count >= 0 && count <= universe_);
  if (count == universe_) {
    all_ = true;
    size_ = 0;
  } else {
    size_ = count;
  }
}

}  // namespace weir::sparsity
