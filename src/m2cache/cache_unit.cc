#include "m2cache/cache_unit.h"

#include "base/check.h"

namespace weir::m2cache {

Result<CacheUnit> CacheUnit::Create(const NeuronRows& like, int64_t capacity, TierMemory* memory) {
  CacheUnit unit(like, capacity, memory);
  const int64_t d_model = like.gate.cols();
  const Shape shape{capacity, d_model};
  const TensorView* from[3] = {&like.gate, &like.up, &like.down_t};
  TensorView* to[3] = {&unit.rows_.gate, &unit.rows_.up, &unit.rows_.down_t};
  for (int i = 0; i < 3; ++i) {
    const size_t bytes = from[i]->row_bytes() * static_cast<size_t>(std::max<int64_t>(capacity, 1));
    WEIR_ASSIGN_OR_RETURN(void* p, memory->Allocate(bytes));
    *to[i] = TensorView{from[i]->dtype, shape, p};
  }
  return unit;
}

int64_t CacheUnit::Update(const NeuronRows& src, std::span<const int32_t> wanted, int32_t* slots,
                          uint64_t* bytes_in) {
  // The rows must be the ones the unit was made for (a bug of the caller otherwise).
  WEIR_CHECK(src.gate.dtype == rows_.gate.dtype && src.gate.cols() == rows_.gate.cols() &&
             src.gate.rows() == map_.n_neurons());
  const int64_t hits = map_.Update(wanted, slots, &loads_);
  const TensorView* from[3] = {&src.gate, &src.up, &src.down_t};
  const TensorView* to[3] = {&rows_.gate, &rows_.up, &rows_.down_t};
  const size_t row = src.gate.row_bytes();
  // Runs of loads with consecutive neurons into consecutive slots are one copy each.
  for (size_t k = 0; k < loads_.size();) {
    size_t end = k + 1;
    while (end < loads_.size() && loads_[end].neuron == loads_[end - 1].neuron + 1 &&
           loads_[end].slot == loads_[end - 1].slot + 1) {
      ++end;
    }
    const size_t n = end - k;
    for (int i = 0; i < 3; ++i) {
      uint8_t* dst = static_cast<uint8_t*>(const_cast<void*>(to[i]->data)) + static_cast<size_t>(loads_[k].slot) * row;
      memory_->CopyIn(dst, from[i]->row(loads_[k].neuron), n * row);
    }
    *bytes_in += 3 * n * row;
    k = end;
  }
  return hits;
}

}  // namespace weir::m2cache
