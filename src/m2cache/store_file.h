// The M2Cache store file: a neuron store (neuron_store.h) and its predictors on disk, laid out so
// that the SSD tier (file_source.h) loads one layer with one large read (M2Cache §5.4).
//
// Format (version 1), all integers little-endian:
//   offset 0   8 bytes   magic "WEIRM2S1"
//   offset 8   u32       version = 1
//   offset 12  u64       J = byte length of the JSON index
//   offset 20  J bytes   the JSON index (UTF-8, no terminator)
//   then       data, at absolute offsets named by the index:
//     per layer l, one extent [offset, offset + bytes), offset and bytes multiples of 4096:
//       the six matrices of layer l, each [d_ff, d_model] row-major, each starting on a 64-byte
//       boundary inside the extent, in this order: high gate, high up, high down_t, low gate,
//       low up, low down_t (down_t row i = column i of W_down); zero padding between them
//     after the last extent, per layer: the predictor's F16 factors, each 4096-aligned:
//       gate_a [rank, d_model], gate_u [d_ff, rank] (and up_a, up_u for predictor "glu"), and
//       optionally up_scale, F32 [d_ff] (M2Weights::up_scale: the lowrank score's factors)
// The JSON index:
//   {"format": "weir-m2cache-store", "n_layers": N, "high": "q8_0", "low": "q4_0",
//    "predictor": {"kind": "lowrank" | "glu" | "none", "rank": R},
//    optionally "plan": {"r_high": F, "r_low": F} (fractions, r_high + r_low <= 1),
//    "layers": [{"d_model": D, "d_ff": F, "offset": O, "bytes": B,
//                "high": {"gate": {"offset": .., "bytes": ..}, "up": {..}, "down_t": {..}},
//                "low":  {"gate": {..}, "up": {..}, "down_t": {..}},
//                "predictor": {"rank": r, "gate_a": {..}, "gate_u": {..}[, "up_a", "up_u"][, "up_scale"]}}]}
//   Every offset is absolute in the file. A layer's predictor rank r is R capped at
//   min(d_ff, d_model); "predictor" is absent from the layers when the kind is "none".
//
// OpenStoreFile checks all of it before it allocates: magic, version, the JSON's types and
// ranges, every extent and matrix inside the file and its extent, every size equal to what the
// shape and type give, d_model a multiple of both types' block sizes.
//
// Thread safety: free functions; a StoreIndex is an immutable value.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "m2cache/mixed_mlp.h"
#include "m2cache/neuron_store.h"
#include "storage/block_device.h"

namespace weir::m2cache {

inline constexpr char kStoreMagic[8] = {'W', 'E', 'I', 'R', 'M', '2', 'S', '1'};
inline constexpr uint32_t kStoreVersion = 1;
inline constexpr uint64_t kStoreExtentAlignment = 4096;

// A byte range of the file.
struct StoreRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

enum StoreMatrix : int { kGate = 0, kUp = 1, kDownT = 2 };

struct StoreLayer {
  int64_t d_model = 0;
  int64_t d_ff = 0;
  StoreRange extent;                         // the layer's six matrices, one read
  StoreRange matrix[kNumPrecisions][3];      // [precision][gate, up, down_t], inside the extent
};

struct StoreIndex {
  std::string path;  // for messages
  StoreTypes types;
  std::vector<StoreLayer> layers;
  uint64_t file_bytes = 0;
  // Bytes of every layer extent (what a fully resident FileSource holds).
  uint64_t extent_bytes() const;
  uint64_t max_extent_bytes() const;
};

// The neuron ratios a store was searched with (`weir m2search`, Algorithm 1), which runs of the
// store use unless they name their own; r_high < 0 = none.
struct StorePlan {
  double r_high = -1, r_low = -1;
  bool valid() const { return r_high >= 0; }
};

// An opened store: its index and the predictors, read resident (M2Weights::store is null).
struct OpenedStore {
  StoreIndex index;
  std::unique_ptr<M2Weights> weights;
  PredictorKind predictor = PredictorKind::kLowRank;  // kOracle: the file has no predictor
  StorePlan plan;
};

// Writes w (its store and predictors) to `path`, atomically: into "<path>.tmp.<pid>" (created
// exclusively, never over an existing file) which is then renamed over `path`.
// progress(layer) after each layer's extent.
// `plan`, when valid, goes into the index as "plan": {"r_high", "r_low"}.
Status WriteStoreFile(const M2Weights& w, const std::string& path,
                      const std::function<void(int)>& progress = nullptr, const StorePlan& plan = {});

// Reads and validates the index of the store file behind `device` (`path` names it in messages)
// and loads its predictors. The device must stay open while a FileSource reads from it.
Result<OpenedStore> OpenStoreFile(const std::string& path, storage::BlockDevice* device);

// Reads [offset, offset + length) of `device` into dst, honouring its required alignment (through
// an aligned bounce buffer when the range or dst is not aligned).
Status ReadRange(storage::BlockDevice* device, uint64_t offset, size_t length, void* dst);

}  // namespace weir::m2cache
