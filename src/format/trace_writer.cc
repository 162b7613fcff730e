#include "format/trace_writer.h"

#include <cerrno>
#include <cstring>

namespace weir::format {
namespace {

void StoreU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void StoreU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

TraceHeader GluNeuronTraceHeader(const LlamaConfig& config, bool cache_events) {
  TraceHeader h;
  h.n_layers = static_cast<uint32_t>(config.n_layers);
  h.has_cache_events = cache_events;
  TraceKind k;
  k.name = "ffn_gate+ffn_up+ffn_down";
  k.weights_per_unit = 3ull * static_cast<uint64_t>(config.d_model);
  for (int l = 0; l < config.n_layers; ++l) {
    int d_ff = l < static_cast<int>(config.layers.size())
                   ? config.layers[static_cast<size_t>(l)].d_ff
                   : config.d_ff;
    k.units.push_back(static_cast<uint32_t>(d_ff));
  }
  h.kinds.push_back(std::move(k));
  return h;
}

Result<std::unique_ptr<TraceWriter>> TraceWriter::Create(const std::string& path,
                                                         const TraceHeader& header) {
  TraceHeader h = header;
  h.n_tokens = kUnknownTokens;
  WEIR_ASSIGN_OR_RETURN(TraceLayout layout, MakeTraceLayout(h, path));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    return Status::IoError(
        StrFormat("%s: cannot create trace: %s", path.c_str(), std::strerror(errno)));
  }
  std::unique_ptr<TraceWriter> w(new TraceWriter());
  w->path_ = path;
  w->file_ = f;
  w->header_ = std::move(h);
  w->layout_ = std::move(layout);
  w->record_.assign(w->layout_.record_bytes, 0);
  w->mask_set_.assign(w->layout_.mask_offset.size(), 0);
  std::vector<uint8_t> bytes = EncodeTraceHeader(w->header_);
  if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    return Status::IoError(
        StrFormat("%s: cannot write trace header: %s", path.c_str(), std::strerror(errno)));
  }
  return w;
}

TraceWriter::~TraceWriter() {
  if (file_) std::fclose(file_);
}

Status TraceWriter::BeginToken() {
  if (!file_) return Status::InvalidArgument(StrFormat("%s: trace already closed", path_.c_str()));
  if (in_token_) {
    return Status::InvalidArgument(StrFormat("%s: BeginToken while token %llu is open",
                                             path_.c_str(),
                                             static_cast<unsigned long long>(n_tokens_)));
  }
  std::fill(record_.begin(), record_.end(), 0);
  std::fill(mask_set_.begin(), mask_set_.end(), 0);
  step_tokens_ = 1;
  in_token_ = true;
  return Status::Ok();
}

Status TraceWriter::CheckBlock(uint32_t layer, uint32_t kind, const char* what) const {
  if (!in_token_) {
    return Status::InvalidArgument(
        StrFormat("%s: %s outside BeginToken/EndToken", path_.c_str(), what));
  }
  if (layer >= layout_.n_layers || kind >= layout_.n_kinds) {
    return Status::InvalidArgument(
        StrFormat("%s: %s for layer %u kind %u, trace has %u layers "
                  "and %u kinds",
                  path_.c_str(), what, layer, kind, layout_.n_layers, layout_.n_kinds));
  }
  if (layout_.units[layout_.Index(layer, kind)] == 0) {
    return Status::InvalidArgument(
        StrFormat("%s: %s for layer %u kind '%s', which has no units "
                  "there",
                  path_.c_str(), what, layer, header_.kinds[kind].name.c_str()));
  }
  return Status::Ok();
}

Status TraceWriter::SetMaskBits(uint32_t layer, uint32_t kind, std::span<const uint8_t> bits) {
  WEIR_RETURN_IF_ERROR(CheckBlock(layer, kind, "SetMaskBits"));
  size_t i = layout_.Index(layer, kind);
  uint32_t units = layout_.units[i];
  if (bits.size() != MaskBytes(units)) {
    return Status::InvalidArgument(
        StrFormat("%s: layer %u kind '%s': mask of %zu bytes, %u units "
                  "need %llu",
                  path_.c_str(), layer, header_.kinds[kind].name.c_str(), bits.size(), units,
                  static_cast<unsigned long long>(MaskBytes(units))));
  }
  if (units % 8 != 0 && (bits.back() >> (units % 8)) != 0) {
    return Status::InvalidArgument(StrFormat("%s: layer %u kind '%s': bits past unit %u are set",
                                             path_.c_str(), layer, header_.kinds[kind].name.c_str(),
                                             units));
  }
  std::memcpy(record_.data() + layout_.mask_offset[i], bits.data(), bits.size());
  mask_set_[i] = 1;
  return Status::Ok();
}

Status TraceWriter::SetMaskIndices(uint32_t layer, uint32_t kind,
                                   std::span<const uint32_t> active) {
  WEIR_RETURN_IF_ERROR(CheckBlock(layer, kind, "SetMaskIndices"));
  size_t i = layout_.Index(layer, kind);
  uint32_t units = layout_.units[i];
  uint8_t* m = record_.data() + layout_.mask_offset[i];
  std::memset(m, 0, MaskBytes(units));
  for (uint32_t u : active) {
    if (u >= units) {
      return Status::InvalidArgument(StrFormat("%s: layer %u kind '%s': active unit %u >= %u units",
                                               path_.c_str(), layer,
                                               header_.kinds[kind].name.c_str(), u, units));
    }
    m[u / 8] |= static_cast<uint8_t>(1u << (u % 8));
  }
  mask_set_[i] = 1;
  return Status::Ok();
}

Status TraceWriter::SetMaskBytes(uint32_t layer, uint32_t kind, std::span<const uint8_t> active) {
  WEIR_RETURN_IF_ERROR(CheckBlock(layer, kind, "SetMaskBytes"));
  size_t i = layout_.Index(layer, kind);
  uint32_t units = layout_.units[i];
  if (active.size() != units) {
    return Status::InvalidArgument(StrFormat("%s: layer %u kind '%s': %zu mask bytes for %u units",
                                             path_.c_str(), layer, header_.kinds[kind].name.c_str(),
                                             active.size(), units));
  }
  uint8_t* m = record_.data() + layout_.mask_offset[i];
  std::memset(m, 0, MaskBytes(units));
  for (uint32_t u = 0; u < units; ++u) {
    if (active[u]) m[u / 8] |= static_cast<uint8_t>(1u << (u % 8));
  }
  mask_set_[i] = 1;
  return Status::Ok();
}

Status TraceWriter::SetStepTokens(uint32_t n_tokens) {
  if (!in_token_) {
    return Status::InvalidArgument(
        StrFormat("%s: SetStepTokens outside BeginToken/EndToken", path_.c_str()));
  }
  if (layout_.step_tokens_offset == 0 || n_tokens == 0) {
    return Status::InvalidArgument(StrFormat(
        "%s: SetStepTokens(%u) needs a header with step sizes and n >= 1", path_.c_str(), n_tokens));
  }
  step_tokens_ = n_tokens;
  return Status::Ok();
}

Status TraceWriter::SetEvents(uint32_t layer, uint32_t kind, const CacheEvents& e) {
  WEIR_RETURN_IF_ERROR(CheckBlock(layer, kind, "SetEvents"));
  if (!layout_.has_cache_events) {
    return Status::InvalidArgument(
        StrFormat("%s: SetEvents but the trace header has no cache "
                  "events",
                  path_.c_str()));
  }
  uint8_t* p = record_.data() + layout_.event_offset[layout_.Index(layer, kind)];
  StoreU32(p, e.hits);
  StoreU32(p + 4, e.misses);
  StoreU32(p + 8, e.evictions);
  StoreU64(p + 12, e.bytes_read);
  return Status::Ok();
}

Status TraceWriter::EndToken() {
  if (!in_token_) {
    return Status::InvalidArgument(StrFormat("%s: EndToken without BeginToken", path_.c_str()));
  }
  for (uint32_t l = 0; l < layout_.n_layers; ++l) {
    for (uint32_t k = 0; k < layout_.n_kinds; ++k) {
      size_t i = layout_.Index(l, k);
      if (layout_.units[i] != 0 && !mask_set_[i]) {
        return Status::InvalidArgument(StrFormat(
            "%s: token %llu: no mask for layer %u kind '%s'", path_.c_str(),
            static_cast<unsigned long long>(n_tokens_), l, header_.kinds[k].name.c_str()));
      }
    }
  }
  StoreU32(record_.data(), kRecordTag);
  StoreU32(record_.data() + 4, static_cast<uint32_t>(layout_.record_bytes));
  StoreU64(record_.data() + 8, n_tokens_);
  if (layout_.step_tokens_offset != 0) {
    StoreU32(record_.data() + layout_.step_tokens_offset, step_tokens_);
  }
  size_t body = record_.size() - 4;
  StoreU32(record_.data() + body, Crc32c(record_.data(), body));
  if (std::fwrite(record_.data(), 1, record_.size(), file_) != record_.size()) {
    return Status::IoError(StrFormat("%s: write of token %llu failed: %s", path_.c_str(),
                                     static_cast<unsigned long long>(n_tokens_),
                                     std::strerror(errno)));
  }
  ++n_tokens_;
  in_token_ = false;
  return Status::Ok();
}

Status TraceWriter::Close() {
  if (!file_) return Status::Ok();
  if (in_token_) {
    return Status::InvalidArgument(StrFormat("%s: Close while token %llu is open", path_.c_str(),
                                             static_cast<unsigned long long>(n_tokens_)));
  }
  header_.n_tokens = n_tokens_;
  std::vector<uint8_t> bytes = EncodeTraceHeader(header_);
  bool ok = std::fflush(file_) == 0 && std::fseek(file_, 0, SEEK_SET) == 0 &&
            std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size();
  int e = errno;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    return Status::IoError(
        StrFormat("%s: cannot finish trace: %s", path_.c_str(), std::strerror(e)));
  }
  return Status::Ok();
}

}  // namespace weir::format
