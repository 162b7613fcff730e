#include "format/trace_reader.h"

#include <sys/stat.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "base/checked_math.h"

namespace weir::format {

// Fuzzing builds (fuzz/, which defines FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION like every
// libFuzzer/OSS-Fuzz build) accept a bad checksum, so that mutated inputs reach the fields the
// checksums guard; every other build rejects it.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kCheckCrc = false;
#else
constexpr bool kCheckCrc = true;
#endif
namespace {

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t LoadU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t LoadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads exactly n bytes at the current position; a short read is reported as truncation.
Status ReadExact(std::FILE* f, uint8_t* dst, size_t n, const std::string& path, uint64_t offset,
                 uint64_t file_size, const char* what) {
  size_t got = std::fread(dst, 1, n, f);
  if (got == n) return Status::Ok();
  if (std::ferror(f)) {
    return Status::IoError(StrFormat("%s: read of %s at offset %llu failed: %s", path.c_str(), what,
                                     static_cast<unsigned long long>(offset),
                                     std::strerror(errno)));
  }
  return Status::Corrupt(
      StrFormat("%s: truncated: %s at offset %llu needs %zu bytes but the "
                "file has %llu bytes",
                path.c_str(), what, static_cast<unsigned long long>(offset), n,
                static_cast<unsigned long long>(file_size)));
}

}  // namespace

const uint8_t* TraceToken::mask(uint32_t layer, uint32_t kind) const {
  if (!layout_ || layer >= layout_->n_layers || kind >= layout_->n_kinds) return nullptr;
  size_t i = layout_->Index(layer, kind);
  if (layout_->units[i] == 0) return nullptr;
  return bytes_.data() + layout_->mask_offset[i];
}

bool TraceToken::active(uint32_t layer, uint32_t kind, uint32_t unit) const {
  const uint8_t* m = mask(layer, kind);
  if (!m || unit >= layout_->units[layout_->Index(layer, kind)]) return false;
  return (m[unit / 8] >> (unit % 8)) & 1;
}

uint32_t TraceToken::CountActive(uint32_t layer, uint32_t kind) const {
  const uint8_t* m = mask(layer, kind);
  if (!m) return 0;
  uint64_t n = MaskBytes(layout_->units[layout_->Index(layer, kind)]);
  uint32_t c = 0;
  for (uint64_t i = 0; i < n; ++i) c += static_cast<uint32_t>(std::popcount(m[i]));
  return c;
}

CacheEvents TraceToken::events(uint32_t layer, uint32_t kind) const {
  CacheEvents e;
  if (!layout_ || !layout_->has_cache_events || !mask(layer, kind)) return e;
  const uint8_t* p = bytes_.data() + layout_->event_offset[layout_->Index(layer, kind)];
  e.hits = LoadU32(p);
  e.misses = LoadU32(p + 4);
  e.evictions = LoadU32(p + 8);
  e.bytes_read = LoadU64(p + 12);
  return e;
}

Result<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    return Status::IoError(
        StrFormat("%s: cannot open trace: %s", path.c_str(), std::strerror(errno)));
  }
  std::unique_ptr<TraceReader> r(new TraceReader());
  r->path_ = path;
  r->file_ = f;
  struct stat st;
  if (::fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(StrFormat("%s: not a regular file", path.c_str()));
  }
  r->file_size_ = static_cast<uint64_t>(st.st_size);

  uint8_t fixed[40];
  WEIR_RETURN_IF_ERROR(ReadExact(f, fixed, sizeof(fixed), path, 0, r->file_size_, "header"));
  if (std::memcmp(fixed, kTraceMagic, 8) != 0) {
    return Status::Corrupt(StrFormat("%s: not a weir trace (bad magic)", path.c_str()));
  }
  TraceHeader& h = r->header_;
  h.version = LoadU32(fixed + 8);
  if (h.version != 1 && h.version != kTraceVersion) {
    return Status::Unsupported(StrFormat("%s: trace version %u, this weir reads versions 1 and %u",
                                         path.c_str(), h.version, kTraceVersion));
  }
  uint32_t header_bytes = LoadU32(fixed + 12);
  h.n_layers = LoadU32(fixed + 16);
  uint32_t n_kinds = LoadU32(fixed + 20);
  uint32_t flags = LoadU32(fixed + 24);
  h.n_tokens = LoadU64(fixed + 32);
  const uint32_t known = h.version == 1 ? kTraceFlagCacheEvents
                                         : kTraceFlagCacheEvents | kTraceFlagStepTokens |
                                               kTraceFlagMetadata;
  if (flags & ~known) {
    return Status::Unsupported(
        StrFormat("%s: unknown trace flags 0x%x for version %u", path.c_str(), flags, h.version));
  }
  h.has_cache_events = (flags & kTraceFlagCacheEvents) != 0;
  h.has_step_tokens = (flags & kTraceFlagStepTokens) != 0;
  const bool has_metadata = (flags & kTraceFlagMetadata) != 0;
  if (h.n_layers == 0 || h.n_layers > kMaxTraceLayers || n_kinds == 0 || n_kinds > kMaxTraceKinds) {
    return Status::Corrupt(StrFormat("%s: n_layers %u / n_kinds %u outside 1..%u / 1..%u",
                                     path.c_str(), h.n_layers, n_kinds, kMaxTraceLayers,
                                     kMaxTraceKinds));
  }
  // The largest possible header for these counts bounds header_bytes before any allocation.
  uint64_t max_header =
      44 + static_cast<uint64_t>(n_kinds) * (2 + kMaxKindName + 8 + 4ull * h.n_layers) +
      (has_metadata ? 4 + kMaxTraceMetadata : 0);
  if (header_bytes < 44 || header_bytes > max_header ||
      !RangeInside(0, header_bytes, r->file_size_)) {
    return Status::Corrupt(
        StrFormat("%s: header_bytes %u is impossible (at most %llu for these "
                  "counts; file has %llu bytes)",
                  path.c_str(), header_bytes, static_cast<unsigned long long>(max_header),
                  static_cast<unsigned long long>(r->file_size_)));
  }
  std::vector<uint8_t> hdr(header_bytes);
  std::memcpy(hdr.data(), fixed, sizeof(fixed));
  WEIR_RETURN_IF_ERROR(ReadExact(f, hdr.data() + 40, header_bytes - 40, path, 40, r->file_size_,
                                 "kind descriptors"));
  uint32_t want_crc = LoadU32(hdr.data() + header_bytes - 4);
  if (Crc32c(hdr.data(), header_bytes - 4) != want_crc && kCheckCrc) {
    return Status::Corrupt(StrFormat("%s: header checksum mismatch", path.c_str()));
  }
  uint64_t off = 40;
  const uint64_t end = header_bytes - 4;
  for (uint32_t k = 0; k < n_kinds; ++k) {
    TraceKind kind;
    if (!RangeInside(off, 2, end)) {
      return Status::Corrupt(
          StrFormat("%s: kind %u descriptor runs past the header", path.c_str(), k));
    }
    uint16_t name_len = LoadU16(hdr.data() + off);
    off += 2;
    uint64_t need = name_len + 8 + 4ull * h.n_layers;
    if (name_len == 0 || name_len > kMaxKindName || !RangeInside(off, need, end)) {
      return Status::Corrupt(
          StrFormat("%s: kind %u descriptor (name length %u) runs past the "
                    "header at offset %llu",
                    path.c_str(), k, name_len, static_cast<unsigned long long>(off)));
    }
    kind.name.assign(reinterpret_cast<const char*>(hdr.data() + off), name_len);
    off += name_len;
    kind.weights_per_unit = LoadU64(hdr.data() + off);
    off += 8;
    kind.units.resize(h.n_layers);
    for (uint32_t l = 0; l < h.n_layers; ++l, off += 4) kind.units[l] = LoadU32(hdr.data() + off);
    h.kinds.push_back(std::move(kind));
  }
  if (has_metadata) {
    if (!RangeInside(off, 4, end)) {
      return Status::Corrupt(StrFormat("%s: metadata length runs past the header", path.c_str()));
    }
    const uint32_t meta_len = LoadU32(hdr.data() + off);
    off += 4;
    if (meta_len == 0 || meta_len > kMaxTraceMetadata || !RangeInside(off, meta_len, end)) {
      return Status::Corrupt(StrFormat(
          "%s: metadata of %u bytes at offset %llu runs past the header or the limit %u",
          path.c_str(), meta_len, static_cast<unsigned long long>(off), kMaxTraceMetadata));
    }
    WEIR_ASSIGN_OR_RETURN(
        h.metadata,
        DecodeTraceMetadata(
            std::string_view(reinterpret_cast<const char*>(hdr.data() + off), meta_len), path));
    off += meta_len;
  }
  if (off != end) {
    return Status::Corrupt(StrFormat("%s: header_bytes %u but the descriptors end at %llu",
                                     path.c_str(), header_bytes,
                                     static_cast<unsigned long long>(off + 4)));
  }
  WEIR_ASSIGN_OR_RETURN(r->layout_, MakeTraceLayout(h, path));
  uint64_t body = r->file_size_ - header_bytes;
  uint64_t complete = body / r->layout_.record_bytes;
  if (h.n_tokens == kUnknownTokens) {
    r->n_tokens_ = complete;
    r->trailing_bytes_ = body - complete * r->layout_.record_bytes;
  } else {
    r->n_tokens_ = h.n_tokens;
    uint64_t want;
    if (!CheckedMul(h.n_tokens, r->layout_.record_bytes, &want) || want != body) {
      return Status::Corrupt(StrFormat(
          "%s: header says %llu tokens of %llu bytes after a %u-byte header, but the file has "
          "%llu bytes (%llu complete records)%s",
          path.c_str(), static_cast<unsigned long long>(h.n_tokens),
          static_cast<unsigned long long>(r->layout_.record_bytes), header_bytes,
          static_cast<unsigned long long>(r->file_size_), static_cast<unsigned long long>(complete),
          want > body ? ": truncated" : ""));
    }
  }
  return r;
}

TraceReader::~TraceReader() {
  if (file_) std::fclose(file_);
}

Status TraceReader::Rewind() {
  if (std::fseek(file_, static_cast<long>(layout_.header_bytes), SEEK_SET) != 0) {
    return Status::IoError(StrFormat("%s: seek failed: %s", path_.c_str(), std::strerror(errno)));
  }
  next_index_ = 0;
  return Status::Ok();
}

Result<bool> TraceReader::Next(TraceToken* token) {
  if (next_index_ >= n_tokens_) return false;
  uint64_t offset = layout_.header_bytes + next_index_ * layout_.record_bytes;
  token->layout_ = &layout_;
  token->bytes_.resize(layout_.record_bytes);
  std::string what = StrFormat("token record %llu", static_cast<unsigned long long>(next_index_));
  WEIR_RETURN_IF_ERROR(ReadExact(file_, token->bytes_.data(), token->bytes_.size(), path_, offset,
                                 file_size_, what.c_str()));
  const uint8_t* p = token->bytes_.data();
  if (LoadU32(p) != kRecordTag || LoadU32(p + 4) != layout_.record_bytes) {
    return Status::Corrupt(
        StrFormat("%s: %s at offset %llu: bad tag 0x%08x or size %u "
                  "(expected %llu)",
                  path_.c_str(), what.c_str(), static_cast<unsigned long long>(offset), LoadU32(p),
                  LoadU32(p + 4), static_cast<unsigned long long>(layout_.record_bytes)));
  }
  size_t body = token->bytes_.size() - 4;
  if (Crc32c(p, body) != LoadU32(p + body) && kCheckCrc) {
    return Status::Corrupt(StrFormat("%s: %s at offset %llu: checksum mismatch", path_.c_str(),
                                     what.c_str(), static_cast<unsigned long long>(offset)));
  }
  uint64_t index = LoadU64(p + 8);
  if (index != next_index_) {
    return Status::Corrupt(
        StrFormat("%s: %s at offset %llu carries token index %llu", path_.c_str(), what.c_str(),
                  static_cast<unsigned long long>(offset), static_cast<unsigned long long>(index)));
  }
  for (uint32_t l = 0; l < layout_.n_layers; ++l) {
    for (uint32_t k = 0; k < layout_.n_kinds; ++k) {
      size_t i = layout_.Index(l, k);
      uint32_t units = layout_.units[i];
      if (units == 0 || units % 8 == 0) continue;
      uint8_t last = p[layout_.mask_offset[i] + MaskBytes(units) - 1];
      if (last >> (units % 8)) {
        return Status::Corrupt(StrFormat("%s: %s layer %u kind '%s': bits set past unit %u",
                                         path_.c_str(), what.c_str(), l,
                                         header_.kinds[k].name.c_str(), units));
      }
    }
  }
  uint32_t step = 1;
  if (layout_.step_tokens_offset != 0) {
    step = LoadU32(p + layout_.step_tokens_offset);
    if (step == 0) {
      return Status::Corrupt(StrFormat("%s: %s at offset %llu covers 0 tokens", path_.c_str(),
                                       what.c_str(), static_cast<unsigned long long>(offset)));
    }
  }
  token->n_tokens_ = step;
  token->token_index_ = index;
  ++next_index_;
  return true;
}

}  // namespace weir::format
