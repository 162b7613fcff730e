// TraceReader: reads a sparsity trace (format in trace_format.h) one token record at a time;
// memory use is one record whatever the trace length. Every field is validated; truncation,
// bad checksums and out-of-order records give a Corrupt status naming the file, the record and
// the byte offset.
//
// Thread safety: none; one reader per thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/trace_format.h"

namespace weir::format {

// One token's masks and events, valid until the next call to TraceReader::Next.
class TraceToken {
 public:
  uint64_t token_index() const { return token_index_; }
  // Tokens this record covers: its step size (traces with step sizes), else 1.
  uint32_t n_tokens() const { return n_tokens_; }
  // Packed mask bits of (layer, kind): MaskBytes(units) bytes, LSB first; null when the kind
  // has no units in that layer.
  const uint8_t* mask(uint32_t layer, uint32_t kind) const;
  bool active(uint32_t layer, uint32_t kind, uint32_t unit) const;
  uint32_t CountActive(uint32_t layer, uint32_t kind) const;
  // Zeros when the trace has no cache events.
  CacheEvents events(uint32_t layer, uint32_t kind) const;

 private:
  friend class TraceReader;
  const TraceLayout* layout_ = nullptr;
  std::vector<uint8_t> bytes_;  // the record
  uint64_t token_index_ = 0;
  uint32_t n_tokens_ = 1;
};

class TraceReader {
 public:
  // Opens and validates the header.
  static Result<std::unique_ptr<TraceReader>> Open(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const std::string& path() const { return path_; }
  const TraceHeader& header() const { return header_; }
  const TraceLayout& layout() const { return layout_; }
  // Token records in the file: the header's count, or, for a trace whose writer was not closed
  // (n_tokens unknown), the number of complete records that fit in the file.
  uint64_t n_tokens() const { return n_tokens_; }
  // False for a trace whose writer was not closed; trailing_bytes() then counts the bytes of a
  // partial last record that Next() does not return.
  bool finished() const { return header_.n_tokens != kUnknownTokens; }
  uint64_t trailing_bytes() const { return trailing_bytes_; }

  // Reads the next record into *token. Returns false after the last one.
  Result<bool> Next(TraceToken* token);
  // Goes back to the first record.
  Status Rewind();

 private:
  TraceReader() = default;

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  TraceHeader header_;
  TraceLayout layout_;
  uint64_t n_tokens_ = 0;
  uint64_t next_index_ = 0;
  uint64_t trailing_bytes_ = 0;
};

}  // namespace weir::format
