// LayerSource: where the MLP computes a layer's neuron rows from (M2Cache §5.4, the tiers below
// the cache units). MixedMlp acquires a layer at the start of its forward step and releases it at
// the end; while acquired, the rows stay valid and unchanged.
//   ResidentSource   the whole neuron store in DRAM (no I/O)
//   FileSource       the SSD tier (file_source.h): a store file (store_file.h) read through a
//                    storage::BlockDevice into a fixed area (the first layers, read once) and a
//                    dynamic area fed by a preloader thread, under a DRAM byte budget
//
// Thread safety: an implementation is used by one consumer thread (Acquire/Release); stats() may
// be read from that thread at any time.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "m2cache/neuron_store.h"
#include "tensor/dtype.h"

namespace weir::m2cache {

// Counters of a source since it was created.
struct SourceStats {
  uint64_t bytes_read = 0;     // bytes read from storage
  uint64_t reads = 0;          // storage reads (one per layer extent)
  double read_seconds = 0;     // time spent inside the device's reads (preloader and fixed area)
  double stall_seconds = 0;    // time Acquire waited for a layer to arrive
  uint64_t acquires = 0;       // Acquire calls
  uint64_t waits = 0;          // Acquire calls that had to wait
};

struct LayerShape {
  int64_t d_ff = 0;
  int64_t d_model = 0;
};

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  virtual int n_layers() const = 0;
  virtual LayerShape shape(int layer) const = 0;
  virtual DType type(Precision p) const = 0;
  // Bytes of one neuron of a layer at precision p (its gate, up and down rows).
  uint64_t neuron_bytes(int layer, Precision p) const {
    return 3 * static_cast<uint64_t>(RowBytes(type(p), shape(layer).d_model));
  }

  // The rows of `layer`, valid until Release(layer). Fails when the storage fails (the next
  // Acquire tries again). Each successful Acquire must be matched by one Release.
  virtual Result<const LayerNeurons*> Acquire(int layer) = 0;
  virtual void Release(int layer) = 0;

  virtual SourceStats stats() const = 0;
  // Bytes this source allocated for rows (0 for a resident store it does not own).
  virtual uint64_t allocated_bytes() const = 0;
  // The tier the rows come from: "dram" (resident) or "ssd" (read from storage).
  virtual const char* tier() const = 0;
  // One line for messages: what is where.
  virtual std::string Describe() const = 0;
};

// The whole store in DRAM: Acquire returns the store's rows. The store is not owned.
class ResidentSource final : public LayerSource {
 public:
  explicit ResidentSource(const NeuronStore* store) : store_(store) {}
  int n_layers() const override { return store_->n_layers(); }
  LayerShape shape(int layer) const override {
    return {store_->layer(layer).d_ff, store_->layer(layer).d_model};
  }
  DType type(Precision p) const override { return store_->type(p); }
  Result<const LayerNeurons*> Acquire(int layer) override;
  void Release(int) override {}
  SourceStats stats() const override { return stats_; }
  uint64_t allocated_bytes() const override { return 0; }
  const char* tier() const override { return "dram"; }
  std::string Describe() const override;

 private:
  const NeuronStore* store_;
  SourceStats stats_;
};

}  // namespace weir::m2cache
