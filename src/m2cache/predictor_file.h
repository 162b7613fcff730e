// The trained predictor file that `weir m2fit -o FILE` writes and `--m2cache predictor=trained:FILE`
// (and `weir m2search --predictor trained:FILE`) reads: one trained predictor per layer
// (trained_predictor.h). Little-endian, byte by byte:
//   offset 0   char[8]  magic "WEIRM2P\0"
//          8   u32      version, 1
//         12   u32      n_layers, 1 .. 65536
//         16   f32      top_fraction the labels marked (0 < f < 1; what the logits were trained for)
//         20   u32      form: 0 = logit (score = U(A x) + v), 1 = gated (score = v ⊙ |act(U(A x))|)
//                       (trained_predictor.h's PredictorForm)
//         24   u64      FNV-1a (64-bit) of every byte from offset 32 to the end
//         32   per layer, back to back:
//                u32 d_model, u32 d_ff, u32 rank   each 1 .. 2^24, rank <= min(d_model, d_ff)
//                u32 reserved, 0
//                F16 A [rank, d_model] row-major, F16 U [d_ff, rank] row-major (finite values)
//                F32 v [d_ff] (finite values): the bias (logit) or the scale (gated)
//   and nothing after the last layer.
// Every field is checked before use (sizes with overflow-safe arithmetic against what is left of
// the file); a bad file gives a Status that names the file, the field and the values.
//
// Thread safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "m2cache/trained_predictor.h"

namespace weir::m2cache {

struct PredictorFile {
  PredictorForm form = PredictorForm::kGated;
  float top_fraction = 0.5f;
  std::vector<TrainedLayer> layers;
};

std::vector<uint8_t> SerializePredictorFile(const PredictorFile& file);
// `name` is the file name the errors give.
Result<PredictorFile> ParsePredictorFile(std::span<const uint8_t> bytes, const std::string& name);
// Writes to PATH.tmp and renames it over PATH.
Status WritePredictorFile(const std::string& path, const PredictorFile& file);
Result<PredictorFile> ReadPredictorFile(const std::string& path);

}  // namespace weir::m2cache
