// The weir sparsity trace format (.wtrace): per decoded token and per streamed layer, which
// units (neurons / input channels) of each streamed tensor kind were active, plus optional cache
// counters from the run that recorded it. Written by `weir run|ppl|bench --trace FILE` and read
// incrementally by `weir sim --masks trace:FILE`, so traces of long runs need not fit in memory.
//
// Byte layout, version 2 (version 1 files, which have neither step sizes nor metadata, are read
// too). All integers little-endian, no padding, no alignment.
//
// File header (header_bytes long):
//   off  size
//     0     8  magic "WEIRTRCE"
//     8     4  u32 version = 2 (or 1)
//    12     4  u32 header_bytes: the size of the whole header, magic and trailing crc included
//    16     4  u32 n_layers, 1..kMaxTraceLayers
//    20     4  u32 n_kinds, 1..kMaxTraceKinds
//    24     4  u32 flags: bit 0 = each record carries cache events;
//              bit 1 = each record carries its step size (version 2);
//              bit 2 = the header carries metadata (version 2); other bits must be 0
//    28     4  u32 reserved = 0
//    32     8  u64 n_tokens: token records that follow, or kUnknownTokens when the writer was
//              not closed (then the reader stops at the last complete record)
//    40        n_kinds kind descriptors, each:
//                u16 name_len (1..kMaxKindName), name bytes (printable ASCII; '+' joins the
//                    tensor kinds one mask applies to, e.g. "ffn_gate+ffn_up+ffn_down"),
//                u64 weights_per_unit: weights one unit covers, summed over the tensors the
//                    kind names (3 * d_model for a neuron of gate+up+down), 0 when unknown,
//                u32 units[n_layers]: units of the kind in each layer (0 = not streamed there,
//                    at most kMaxTraceUnits)
//     *        if flags bit 2: u32 meta_len (at most kMaxTraceMetadata), then meta_len bytes of
//              "key=value\n" lines (printable ASCII; keys non-empty, without '='), e.g. the
//              engine settings a replay needs (docs/simulator.md, "Traces")
//     *     4  u32 header_crc: CRC-32C of header bytes [0, header_bytes - 4)
//
// Token record, repeated n_tokens times (its size is fixed by the header):
//     0     4  u32 tag kRecordTag ("TOKN")
//     4     4  u32 record_bytes: size of this whole record, tag to crc inclusive
//     8     8  u64 token_index: 0, 1, 2, ... (consecutive)
//    16     4  if flags bit 1: u32 n_tokens >= 1, the tokens this record covers: a record is then
//              one forward step (a prompt batch goes through the streamed weights once); without
//              bit 1 every record is one token
//     *        for layer 0..n_layers-1, for kind 0..n_kinds-1 with units > 0:
//                ceil(units / 8) bytes of mask: unit u is active iff bit (u % 8) of byte u / 8
//                is set (least significant bit first); bits past `units` must be 0
//     *        if flags bit 0, for the same (layer, kind) order, 20 bytes of cache events:
//                u32 hits, u32 misses, u32 evictions (in units), u64 bytes_read (from storage)
//     *     4  u32 crc: CRC-32C of the record bytes before it
//
// A file that ends inside a record, a bad crc, a wrong tag or token index, or fewer records than
// the header's n_tokens is reported as corrupt, naming the file, the record and the offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace weir::format {

constexpr char kTraceMagic[8] = {'W', 'E', 'I', 'R', 'T', 'R', 'C', 'E'};
constexpr uint32_t kTraceVersion = 2;  // written; versions 1 and 2 are read
constexpr uint32_t kRecordTag = 0x4E4B4F54;  // "TOKN" little-endian
constexpr uint64_t kUnknownTokens = ~0ull;
constexpr uint32_t kTraceFlagCacheEvents = 1u;
constexpr uint32_t kTraceFlagStepTokens = 2u;
constexpr uint32_t kTraceFlagMetadata = 4u;
constexpr uint32_t kMaxTraceMetadata = 1u << 16;
constexpr uint32_t kMaxTraceLayers = 65536;
constexpr uint32_t kMaxTraceKinds = 64;
constexpr uint32_t kMaxKindName = 255;
constexpr uint32_t kMaxTraceUnits = 1u << 26;  // 64 Mi units per (layer, kind)
// A record larger than this is refused (a hostile header cannot make the reader allocate more).
constexpr uint64_t kMaxRecordBytes = 1ull << 32;
constexpr size_t kCacheEventBytes = 20;

// One streamed tensor kind: its name, the weights one unit covers (over all its tensors), and its
// unit count in each layer.
struct TraceKind {
  std::string name;
  uint64_t weights_per_unit = 0;
  std::vector<uint32_t> units;  // [n_layers]
};

struct TraceHeader {
  uint32_t version = kTraceVersion;
  uint32_t n_layers = 0;
  bool has_cache_events = false;
  bool has_step_tokens = false;        // records carry their step size (flags bit 1)
  uint64_t n_tokens = kUnknownTokens;  // set by the writer on Close()
  std::vector<TraceKind> kinds;
  // Metadata (flags bit 2 when not empty), in file order.
  std::vector<std::pair<std::string, std::string>> metadata;
  // The value of `key`, or null.
  const std::string* FindMetadata(const std::string& key) const {
    for (const auto& [k, v] : metadata)
      if (k == key) return &v;
    return nullptr;
  }
};

// Cache counters the engine observed for one (token, layer, kind).
struct CacheEvents {
  uint32_t hits = 0;
  uint32_t misses = 0;
  uint32_t evictions = 0;
  uint64_t bytes_read = 0;
  bool operator==(const CacheEvents&) const = default;
};

// Where each (layer, kind) block sits inside a token record; derived from a validated header.
struct TraceLayout {
  uint32_t n_layers = 0;
  uint32_t n_kinds = 0;
  bool has_cache_events = false;
  uint64_t step_tokens_offset = 0;  // of the u32 step size in a record; 0 when absent
  uint64_t header_bytes = 0;
  uint64_t record_bytes = 0;
  // [n_layers * n_kinds]: byte offset of the mask inside a record (0 when units == 0), and of
  // the cache events (0 when absent).
  std::vector<uint64_t> mask_offset;
  std::vector<uint64_t> event_offset;
  std::vector<uint32_t> units;  // [n_layers * n_kinds]

  size_t Index(uint32_t layer, uint32_t kind) const {
    return static_cast<size_t>(layer) * n_kinds + kind;
  }
};

// Checks a header's fields against the limits above and computes the layout (overflow-safe).
// `where` names the file in messages.
Result<TraceLayout> MakeTraceLayout(const TraceHeader& header, const std::string& where);

// Bytes of one (layer, kind) mask with `units` bits.
inline uint64_t MaskBytes(uint32_t units) { return (static_cast<uint64_t>(units) + 7) / 8; }

// CRC-32C (Castagnoli), as used by the header and record checksums. `crc` chains calls.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// Metadata as the header stores it ("key=value\n" lines), checking keys and bytes; and back.
Result<std::string> EncodeTraceMetadata(
    const std::vector<std::pair<std::string, std::string>>& metadata, const std::string& where);
Result<std::vector<std::pair<std::string, std::string>>> DecodeTraceMetadata(
    std::string_view text, const std::string& where);

// Serializes the header (with its crc). The caller writes it at offset 0.
std::vector<uint8_t> EncodeTraceHeader(const TraceHeader& header);

}  // namespace weir::format
