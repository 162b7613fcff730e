#include "format/trace_format.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/check.h"
#include "base/checked_math.h"

namespace weir::format {
namespace {

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void PutU16(std::vector<uint8_t>* out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

Result<TraceLayout> MakeTraceLayout(const TraceHeader& h, const std::string& where) {
  if (h.version != 1 && h.version != kTraceVersion) {
    return Status::Unsupported(StrFormat("%s: trace version %u, this weir reads versions 1 and %u",
                                         where.c_str(), h.version, kTraceVersion));
  }
  if (h.version == 1 && (h.has_step_tokens || !h.metadata.empty())) {
    return Status::InvalidArgument(
        StrFormat("%s: step sizes and metadata need trace version 2", where.c_str()));
  }
  if (h.n_layers == 0 || h.n_layers > kMaxTraceLayers) {
    return Status::Corrupt(
        StrFormat("%s: n_layers %u outside 1..%u", where.c_str(), h.n_layers, kMaxTraceLayers));
  }
  if (h.kinds.empty() || h.kinds.size() > kMaxTraceKinds) {
    return Status::Corrupt(
        StrFormat("%s: n_kinds %zu outside 1..%u", where.c_str(), h.kinds.size(), kMaxTraceKinds));
  }
  TraceLayout L;
  L.n_layers = h.n_layers;
  L.n_kinds = static_cast<uint32_t>(h.kinds.size());
  L.has_cache_events = h.has_cache_events;
  uint64_t header_bytes = 40 + 4;
  for (size_t k = 0; k < h.kinds.size(); ++k) {
    const TraceKind& kind = h.kinds[k];
    if (kind.name.empty() || kind.name.size() > kMaxKindName) {
      return Status::Corrupt(StrFormat("%s: kind %zu name length %zu outside 1..%u", where.c_str(),
                                       k, kind.name.size(), kMaxKindName));
    }
    for (char c : kind.name) {
      if (c < 0x21 || c > 0x7E) {
        return Status::Corrupt(StrFormat("%s: kind %zu name has a non-printable byte 0x%02x",
                                         where.c_str(), k, static_cast<unsigned>(c) & 0xFF));
      }
    }
    if (kind.units.size() != h.n_layers) {
      return Status::InvalidArgument(StrFormat("%s: kind '%s' has %zu unit counts for %u layers",
                                               where.c_str(), kind.name.c_str(), kind.units.size(),
                                               h.n_layers));
    }
    header_bytes += 2 + kind.name.size() + 8 + 4ull * h.n_layers;
  }
  if (!h.metadata.empty()) {
    WEIR_ASSIGN_OR_RETURN(std::string text, EncodeTraceMetadata(h.metadata, where));
    header_bytes += 4 + text.size();
  }
  L.header_bytes = header_bytes;
  L.mask_offset.assign(static_cast<size_t>(L.n_layers) * L.n_kinds, 0);
  L.event_offset.assign(static_cast<size_t>(L.n_layers) * L.n_kinds, 0);
  L.units.assign(static_cast<size_t>(L.n_layers) * L.n_kinds, 0);
  uint64_t off = 16;
  if (h.has_step_tokens) {
    L.step_tokens_offset = off;
    off += 4;
  }
  bool any = false;
  for (uint32_t l = 0; l < L.n_layers; ++l) {
    for (uint32_t k = 0; k < L.n_kinds; ++k) {
      uint32_t u = h.kinds[k].units[l];
      if (u > kMaxTraceUnits) {
        return Status::Corrupt(StrFormat("%s: kind '%s' layer %u has %u units (limit %u)",
                                         where.c_str(), h.kinds[k].name.c_str(), l, u,
                                         kMaxTraceUnits));
      }
      L.units[L.Index(l, k)] = u;
      if (u == 0) continue;
      any = true;
      L.mask_offset[L.Index(l, k)] = off;
      if (!CheckedAdd(off, MaskBytes(u), &off)) {
        return Status::Corrupt(StrFormat("%s: record size overflows", where.c_str()));
      }
    }
  }
  if (!any) {
    return Status::Corrupt(StrFormat("%s: no kind has units in any layer", where.c_str()));
  }
  if (h.has_cache_events) {
    for (uint32_t l = 0; l < L.n_layers; ++l) {
      for (uint32_t k = 0; k < L.n_kinds; ++k) {
        if (L.units[L.Index(l, k)] == 0) continue;
        L.event_offset[L.Index(l, k)] = off;
        off += kCacheEventBytes;  // bounded: at most 2^16 * 64 blocks of 20 bytes
      }
    }
  }
  off += 4;  // crc
  if (off > kMaxRecordBytes) {
    return Status::Corrupt(StrFormat("%s: token record of %llu bytes exceeds the limit %llu",
                                     where.c_str(), static_cast<unsigned long long>(off),
                                     static_cast<unsigned long long>(kMaxRecordBytes)));
  }
  L.record_bytes = off;
  return L;
}

Result<std::string> EncodeTraceMetadata(
    const std::vector<std::pair<std::string, std::string>>& metadata, const std::string& where) {
  std::string text;
  for (const auto& [key, value] : metadata) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return Status::InvalidArgument(
          StrFormat("%s: metadata key '%s' is empty or holds '='", where.c_str(), key.c_str()));
    }
    for (char c : key + value) {
      if (c < 0x20 || c > 0x7E) {
        return Status::InvalidArgument(
            StrFormat("%s: metadata '%s' has a non-printable byte 0x%02x", where.c_str(),
                      key.c_str(), static_cast<unsigned>(c) & 0xFF));
      }
    }
    text += key + "=" + value + "\n";
  }
  if (text.size() > kMaxTraceMetadata) {
    return Status::InvalidArgument(StrFormat("%s: %zu bytes of metadata exceed the limit %u",
                                             where.c_str(), text.size(), kMaxTraceMetadata));
  }
  return text;
}

Result<std::vector<std::pair<std::string, std::string>>> DecodeTraceMetadata(
    std::string_view text, const std::string& where) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) {
      return Status::Corrupt(StrFormat("%s: metadata does not end with a newline", where.c_str()));
    }
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    const size_t eq = line.find('=');
    if (eq == 0 || eq == std::string_view::npos) {
      return Status::Corrupt(StrFormat("%s: metadata line '%.*s' is not key=value", where.c_str(),
                                       static_cast<int>(std::min<size_t>(line.size(), 60)),
                                       line.data()));
    }
    for (char c : line) {
      if (c < 0x20 || c > 0x7E) {
        return Status::Corrupt(StrFormat("%s: metadata has a non-printable byte 0x%02x",
                                         where.c_str(), static_cast<unsigned>(c) & 0xFF));
      }
    }
    out.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return out;
}

std::vector<uint8_t> EncodeTraceHeader(const TraceHeader& h) {
  std::vector<uint8_t> out(kTraceMagic, kTraceMagic + 8);
  PutU32(&out, h.version);
  PutU32(&out, 0);  // header_bytes, patched below
  PutU32(&out, h.n_layers);
  PutU32(&out, static_cast<uint32_t>(h.kinds.size()));
  PutU32(&out, (h.has_cache_events ? kTraceFlagCacheEvents : 0u) |
                   (h.has_step_tokens ? kTraceFlagStepTokens : 0u) |
                   (h.metadata.empty() ? 0u : kTraceFlagMetadata));
  PutU32(&out, 0);
  PutU64(&out, h.n_tokens);
  for (const TraceKind& k : h.kinds) {
    PutU16(&out, static_cast<uint16_t>(k.name.size()));
    out.insert(out.end(), k.name.begin(), k.name.end());
    PutU64(&out, k.weights_per_unit);
    for (uint32_t u : k.units) PutU32(&out, u);
  }
  if (!h.metadata.empty()) {
    // Validated by MakeTraceLayout before any header is encoded.
    Result<std::string> text = EncodeTraceMetadata(h.metadata, "trace");
    WEIR_CHECK(text.ok());
    PutU32(&out, static_cast<uint32_t>(text->size()));
    out.insert(out.end(), text->begin(), text->end());
  }
  uint32_t header_bytes = static_cast<uint32_t>(out.size() + 4);
  for (int i = 0; i < 4; ++i) out[12 + i] = static_cast<uint8_t>(header_bytes >> (8 * i));
  PutU32(&out, Crc32c(out.data(), out.size()));
  return out;
}

}  // namespace weir::format
