// TraceWriter: records sparsity traces (format in trace_format.h) one token at a time, so a run
// of any length writes in constant memory. The engine calls, per decoded token:
//   BeginToken(); SetMask...(layer, kind, ...) for every streamed (layer, kind);
//   [SetEvents(layer, kind, events)]; EndToken();
// and Close() at the end, which patches the token count into the header.
//
// Thread safety: none; one writer per file, used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/model_file.h"
#include "format/trace_format.h"

namespace weir::format {

// The header for GLU neuron masks, the layout `weir sim` replays for MLP streaming: one kind,
// "ffn_gate+ffn_up+ffn_down", with d_ff units per layer (each unit a row of gate and up and a
// column of down, 3 * d_model weights).
TraceHeader GluNeuronTraceHeader(const LlamaConfig& config, bool cache_events);

class TraceWriter {
 public:
  // Creates (truncates) `path` and writes the header (version 2 unless header.version is 1).
  // header.n_tokens is ignored.
  static Result<std::unique_ptr<TraceWriter>> Create(const std::string& path,
                                                     const TraceHeader& header);
  ~TraceWriter();  // closes the file without patching the count if Close() was not called
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  const TraceHeader& header() const { return header_; }
  const TraceLayout& layout() const { return layout_; }
  uint64_t tokens_written() const { return n_tokens_; }

  // Starts the next token; every (layer, kind) with units must then get a mask.
  Status BeginToken();
  // The mask as packed bits (LSB first, MaskBytes(units) bytes, padding bits zero).
  Status SetMaskBits(uint32_t layer, uint32_t kind, std::span<const uint8_t> bits);
  // The mask as a list of active unit indices (any order, no duplicates needed).
  Status SetMaskIndices(uint32_t layer, uint32_t kind, std::span<const uint32_t> active);
  // The mask as one byte per unit (non-zero = active).
  Status SetMaskBytes(uint32_t layer, uint32_t kind, std::span<const uint8_t> active);
  // Tokens this record covers (default 1); only for headers with has_step_tokens.
  Status SetStepTokens(uint32_t n_tokens);
  // Cache counters; only for headers with has_cache_events (else an error). Default zeros.
  Status SetEvents(uint32_t layer, uint32_t kind, const CacheEvents& events);
  // Checks every mask was set and appends the record.
  Status EndToken();
  // Flushes, patches n_tokens and the header crc, closes. Idempotent.
  Status Close();

 private:
  TraceWriter() = default;
  Status CheckBlock(uint32_t layer, uint32_t kind, const char* what) const;

  std::string path_;
  std::FILE* file_ = nullptr;
  TraceHeader header_;
  TraceLayout layout_;
  std::vector<uint8_t> record_;
  std::vector<uint8_t> mask_set_;  // [n_layers * n_kinds], for the token in progress
  bool in_token_ = false;
  uint32_t step_tokens_ = 1;
  uint64_t n_tokens_ = 0;
};

}  // namespace weir::format
