#include <string>

#include "m2cache/layer_source.h"

namespace weir::m2cache {

Result<const LayerNeurons*> ResidentSource::Acquire(int layer) {
  if (layer < 0 || layer >= store_->n_layers()) {
    return Status::InvalidArgument("m2cache: layer " + std::to_string(layer) + " of a store of " +
                                   std::to_string(store_->n_layers()) + " layers");
  }
  stats_.acquires += 1;
  return &store_->layer(layer);
}

std::string ResidentSource::Describe() const {
  return "the neuron store resident in DRAM (" + std::to_string(store_->bytes() >> 10) + " KiB)";
}

}  // namespace weir::m2cache
