// FileSource: the SSD tier below the neuron store (M2Cache §5.4, "pattern-aware preloading"): the
// store file (store_file.h) read through a storage::BlockDevice into a two-level DRAM cache under
// a byte budget:
//   fixed area     the first n layers, read once at Create and kept (a new token starts there)
//   dynamic area   window + 1 buffers of the largest layer extent: the acquired layer and the
//                  `window` layers after it, which a preloader thread reads ahead, each layer as
//                  one large read of its extent. Decode visits the layers cyclically, so "after
//                  the last layer" wraps to the first layer outside the fixed area.
// n is as many layers as the budget leaves after the dynamic area; a budget that holds the whole
// store keeps every layer in the fixed area (no thread). A budget below the dynamic area fails.
//
// When Acquire(l) is called the preloader is asked for l, l+1, ..., l+window (nearest first); it
// reuses a buffer only when the buffer is not acquired, not being read and holds no wanted layer,
// so an acquired layer's bytes never change. A failed read is kept with its buffer and returned
// by the Acquire of that layer, which frees the buffer: the next Acquire reads it again.
//
// Thread safety: Acquire/Release/stats from one consumer thread; the preloader thread is internal
// (one mutex and one condition variable) and joined by the destructor. The device must accept
// reads from the preloader thread (every storage:: device does) and outlive the source.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "m2cache/layer_source.h"
#include "m2cache/store_file.h"
#include "storage/block_device.h"

namespace weir::m2cache {

struct FileSourceOptions {
  uint64_t budget_bytes = UINT64_MAX;  // DRAM for layer rows: the fixed and dynamic areas
  int window = 2;                      // layers read ahead of the acquired one (0 = on demand)
};

class FileSource final : public LayerSource {
 public:
  static Result<std::unique_ptr<FileSource>> Create(const StoreIndex& index, storage::BlockDevice* device,
                                                    const FileSourceOptions& options);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  int n_layers() const override { return static_cast<int>(index_.layers.size()); }
  LayerShape shape(int layer) const override;
  DType type(Precision p) const override { return p == kHigh ? index_.types.high : index_.types.low; }
  Result<const LayerNeurons*> Acquire(int layer) override;
  void Release(int layer) override;
  SourceStats stats() const override;
  uint64_t allocated_bytes() const override { return allocated_bytes_; }
  const char* tier() const override { return "ssd"; }

  int fixed_layers() const { return n_fixed_; }
  int dynamic_buffers() const { return static_cast<int>(slots_.size()); }
  int window() const { return window_; }
  uint64_t budget_bytes() const { return budget_bytes_; }
  // "12 of 30 layers fixed (5.1 MiB) + 3 preload buffers of 420 KiB, 6.4 MiB of a 6.5 MiB budget"
  std::string Describe() const override;

 private:
  enum class SlotState { kEmpty, kLoading, kReady, kFailed };
  struct Slot {
    AlignedBuffer buffer;  // [max extent bytes]
    LayerNeurons rows;     // views into buffer for `layer`
    int layer = -1;
    SlotState state = SlotState::kEmpty;
    int pins = 0;
    Status error;  // kFailed
  };

  FileSource(const StoreIndex& index, storage::BlockDevice* device) : index_(index), device_(device) {}
  LayerNeurons RowsAt(int layer, const uint8_t* base) const;
  int NextDynamic(int layer) const;
  void SetWanted(int layer);  // under mu_
  bool IsWanted(int layer) const;
  bool NextJob(int* layer, Slot** slot);  // under mu_
  void PreloadLoop();

  StoreIndex index_;
  storage::BlockDevice* device_;
  uint64_t budget_bytes_ = 0;
  uint64_t allocated_bytes_ = 0;
  int window_ = 0;
  int n_fixed_ = 0;
  std::vector<AlignedBuffer> fixed_buffers_;
  std::vector<LayerNeurons> fixed_rows_;  // [n_fixed_]

  mutable std::mutex mu_;
  std::condition_variable cv_;  // any change of a slot, of wanted_ or of stop_
  std::vector<Slot> slots_;     // the dynamic area
  std::vector<int> wanted_;     // dynamic layers to hold, nearest first
  bool stop_ = false;
  SourceStats stats_;
  std::thread preloader_;
};

}  // namespace weir::m2cache
