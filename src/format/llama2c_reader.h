// Reader for llama2.c checkpoints, legacy version 0 (what export.py --version 0 and the
// original tinyllamas .bin files use). All values little-endian; no padding anywhere.
//
//   offset 0   7 x i32 header:
//                dim          d_model
//                hidden_dim   d_ff
//                n_layers
//                n_heads
//                n_kv_heads
//                vocab_size   > 0: the classifier is token_embedding (shared);
//                             < 0: |vocab_size| tokens and a separate wcls at the end
//                seq_len      training context length
//   offset 28  f32 arrays, back to back, shapes outermost first
//              (head_size = dim / n_heads, kv_dim = n_kv_heads * head_size, L = n_layers):
//                token_embedding  [vocab, dim]
//                rms_att          [L, dim]
//                wq               [L, dim, dim]
//                wk               [L, kv_dim, dim]
//                wv               [L, kv_dim, dim]
//                wo               [L, dim, dim]
//                rms_ffn          [L, dim]
//                w1               [L, hidden_dim, dim]    gate  -> blk.N.ffn_gate
//                w2               [L, dim, hidden_dim]    down  -> blk.N.ffn_down
//                w3               [L, hidden_dim, dim]    up    -> blk.N.ffn_up
//                rms_final        [dim]
//                freq_cis_real    [seq_len, head_size / 2]   (unused: recomputed from theta)
//                freq_cis_imag    [seq_len, head_size / 2]   (unused)
//                wcls             [vocab, dim]            only when vocab_size < 0
// The file must be exactly this long. RoPE pairs adjacent dimensions (RopeStyle::kAdjacentPairs),
// theta 10000, RMSNorm eps 1e-5 (llama2.c's constants; the file does not store them).
//
// Newer llama2.c exports (version 1 and 2) start with the magic "ak42"; they are recognized and
// reported as unsupported.
//
// Tensor views point straight into the read-only mapping (no copies). The tokenizer is
// options.tokenizer_path, else tok<vocab>.bin or tokenizer.bin beside the model; with none the
// ModelFile's tokenizer has kind kNone and the engine runs on token ids.
//
// Thread safety: free functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "format/model_file.h"

namespace weir::format {

struct Llama2cHeader {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // absolute value
  int32_t seq_len = 0;
  bool shared_classifier = true;
  uint64_t expected_file_bytes = 0;  // header + all arrays
};

constexpr uint64_t kLlama2cHeaderBytes = 28;

// Decodes and checks the header fields of `data[0..size)` (the file size is not compared).
Result<Llama2cHeader> ParseLlama2cHeader(const uint8_t* data, uint64_t size,
                                         const std::string& path);

Result<ModelFile> LoadLlama2cModel(const std::string& path, const LoadOptions& options = {});

}  // namespace weir::format
