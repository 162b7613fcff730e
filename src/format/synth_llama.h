// Synthetic models: a GGUF file with real shapes and random weights, for tests and for
// benchmarks at sizes no real model here has (llama.cpp loads these files too). Any
// architecture of format/arch_spec.h (SynthSpec::arch); its tensor table says what is written.
//
// Weights: every element of every 2-D tensor is 0.02 * z with z standard normal, i.i.d.,
// i.e. N(0, 0.02^2) (0.02 is the usual Llama initialisation std). z comes from a Box-Muller
// transform (24-bit uniforms, so |z| <= 5.8) of a SplitMix64 stream seeded per (seed, tensor,
// row), so any row can be generated independently (rows are generated in parallel) and the
// same seed always gives the same bytes.
// attn_q and attn_k are multiplied by SynthSpec::qk_gain (1 by default).
// Norm weights are 1.0 (F32) for llama; for the other architectures 1 + 5 * (0.02 z), so that a
// norm applied to the wrong vector, or not at all, shows in the logits. Biases (qwen2) are
// 0.02 z. token_embd and output are written too (untied), except for rows whose head is always
// token_embd (ArchSpec::tied_head: gemma2), which get no output.weight.
//
// Vocabulary (SentencePiece, "llama"): 0 <unk> (UNKNOWN), 1 <s> (CONTROL), 2 </s> (CONTROL),
// 3..258 <0x00>..<0xFF> (BYTE), then filler pieces: "▁", the printable ASCII characters, "▁" +
// each letter, then lowercase strings of growing length (each preceded by its "▁"-prefixed
// variants), until vocab_size. Filler piece k scores -k, so every string tokenizes (by pieces
// or byte fallback) and decodes back.
//
// Thread safety: free functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/model_file.h"
#include "format/tokenizer_spec.h"
#include "tensor/dtype.h"

namespace weir::format {

struct SynthSpec {
  std::string name = "custom";
  std::string arch = "llama";  // a row of format/arch_spec.h
  int d_model = 0;
  int n_layers = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int d_ff = 0;
  int vocab_size = 0;  // at least 259 (3 specials + 256 byte tokens)
  int ctx_len = 2048;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  int head_dim = 0;        // 0: d_model / n_head
  int sliding_window = 0;  // > 0: the architecture's sliding-window layers (gemma3) see this many
  int n_expert = 0;        // mixture-of-experts rows: experts per layer (d_ff is each one's width)
  int n_expert_used = 0;   //   and experts per token
  // Mixture-of-experts rows: router row e is scaled by (1 + e)^-router_skew, so that the router's
  // logits for low-numbered experts spread wider and they are chosen more often (a skewed,
  // Zipf-like routing, as trained routers have; 0 = every expert alike).
  float router_skew = 0.0f;
  // Soft-caps of the rows that have them (0 = none): the attention scores' (gemma2) and the final
  // logits' (gemma2, gemma3).
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // RoPE scaling written into the file: linear (<arch>.rope.scaling.type "linear" with this
  // factor; 1 = none) and per-pair frequency factors (rope_freqs.weight, head_dim / 2 values
  // > 0, e.g. Llama3RopeFreqs of format/rope_scaling.h; empty = none; llama and mixtral only).
  float rope_scaling_factor = 1.0f;
  std::vector<float> rope_freqs;
  // attn_q and attn_k weights are multiplied by this (same random bits): attention scores grow by
  // its square. At 1, N(0, 0.02) weights give scores near 0 and almost uniform attention, where
  // positions (RoPE and its scaling) barely move the logits; a gain of ~8 makes attention sharp
  // enough that a wrong RoPE changes the greedy tokens.
  float qk_gain = 1.0f;
  int rope_dim = 0;  // rotated dims per head; 0: head_dim
};

// "tiny": d_model 64, 2 layers, 4 heads, 2 kv heads, d_ff 192, vocab 320, ctx 256.
//   (vocab 320 rather than 256: the byte-fallback vocabulary alone needs 259 ids.)
// "llama-1b": TinyLlama-1.1B shapes: 2048, 22 layers, 32 heads, 4 kv heads, d_ff 5632,
//   vocab 32000, ctx 2048.
// "llama-7b": Llama-2-7B shapes: 4096, 32 layers, 32 heads, 32 kv heads, d_ff 11008,
//   vocab 32000, ctx 4096.
// Other architectures (`arch`) have "tiny" only, plus their real small model's shapes:
//   qwen2 "tiny": llama's tiny with q/k/v biases.
//   qwen3 "tiny": llama's tiny with head_dim 32 (q_dim 128 != d_model) and QK-norm.
//   gemma3 "tiny": d_model 64, 6 layers (5 sliding with a window of 4, then 1 global), 4 heads,
//     1 kv head, head_dim 32, d_ff 192, vocab 320, ctx 512, RoPE bases 1e6 (global) and 1e4
//     (sliding), rms_eps 1e-6. A 20-token prompt crosses the window and the KV ring.
//   gemma2 "tiny": d_model 64, 4 layers (0 and 2 sliding with a window of 4, 1 and 3 global; one
//     RoPE base, 1e5 rather than Gemma 2's 10000 so that a sliding layer rotating with gemma3's
//     10000 would show; no rope.freq_base_swa key, as the converter writes none), 4 heads, 2 kv
//     heads, head_dim 32, d_ff 192, vocab 320, ctx 512, rms_eps 1e-6, and soft-caps small
//     enough to bite on random weights: attention 0.05 (the scores q.k/sqrt(32) reach +-0.1
//     here; Gemma 2's own cap is 50, for trained scores) and final 0.5 (the logits reach +-0.62;
//     Gemma 2's is 30). Leaving out the attention cap moves the logits by 2.5e-2 of their range,
//     the final one by 0.46, the window (every layer global) by 1.4 (numpy oracle, seed 1234,
//     20 tokens). A smaller final cap would squeeze the logits' range and so inflate the oracle
//     test's relative error of Q8 activations.
//   gemma3 "gemma3-270m": Gemma 3 270M's shapes (640, 18 layers, 4 heads, 1 kv head, head_dim
//     256, d_ff 2048, vocab 262144, window 512).
//   gemma3 "gemma3-1b": Gemma 3 1B's shapes (1152, 26 layers, 4 heads, 1 kv head, head_dim 256,
//     d_ff 6912, vocab 262144, window 512); about 0.6 GB as Q4_0.
//   qwen3 "qwen3-1.7b": Qwen3-1.7B's shapes (2048, 28 layers, 16 heads, 8 kv heads, head_dim
//     128, d_ff 6144, vocab 151936, RoPE base 1e6) with an output head of its own (the real
//     model ties it); about 1.2 GB as Q4_0.
//   mixtral "tiny": llama's tiny with 8 experts of d_ff 64, 2 per token, RoPE base 1e6.
//   mixtral "small": Mixtral 8x7B's layer shapes with 4 layers (4096, 32 heads, 8 kv heads, 8
//     experts of d_ff 14336, 2 per token, vocab 32000); about 3.3 GB as Q4_0.
//   qwen3moe "tiny": qwen3's tiny with 16 experts of d_ff 32, 4 per token.
//   phi3 "tiny": llama's tiny with RoPE on 12 of each head's 16 dims (Phi-4-mini rotates 3/4 of
//     each head), written with fused attn_qkv [128, 64] and ffn_up [384, 64] (gate, then up).
//   qwen3moe "small": Qwen3-30B-A3B's layer shapes with 8 layers (2048, 32 heads, 4 kv heads,
//     head_dim 128, 128 experts of d_ff 768, 8 per token, vocab 151936); about 3 GB as Q4_0.
//   The router (ffn_gate_inp) is always written F32, as llama-quantize leaves it.
Result<SynthSpec> SynthPreset(const std::string& name, const std::string& arch = "llama");
std::vector<std::string> SynthPresetNames(const std::string& arch = "llama");

// Checks the architecture and dims (positive, heads divide d_model unless head_dim is given and
// each other, even head_dim, vocab >= 259, rows a whole number of `type` blocks).
Status ValidateSynthSpec(const SynthSpec& spec, DType type);

// The config a reader gets back from a synthetic file.
LlamaConfig SynthConfig(const SynthSpec& spec);
// The synthetic vocabulary described above.
TokenizerSpec SynthVocabulary(int vocab_size);

// Fills dst[0..n) with 0.02 * N(0, 1) values of row `row` of tensor number `tensor_index`.
// Uses float polynomial log/sin/cos (branch-free, vectorized; ~1e-7 relative error).
void SynthRandomRow(uint64_t seed, uint64_t tensor_index, uint64_t row, float* dst, int64_t n);
// The same values from the same random bits with libm in double precision: the reference the
// fast path is tested against (agreement within ~1e-6 relative to 0.02).
void SynthRandomRowReference(uint64_t seed, uint64_t tensor_index, uint64_t row, float* dst,
                             int64_t n);

// Writes the model (via path.tmp + rename). 2-D weights in `type`, norms and biases F32. `progress` gets
// the fraction written; `pool` (optional) generates rows in parallel.
Status WriteRandomLlamaGguf(const SynthSpec& spec, DType type, uint64_t seed,
                            const std::string& path, std::function<void(double)> progress,
                            ThreadPool* pool = nullptr);

}  // namespace weir::format
