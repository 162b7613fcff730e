#include "sim/trace_source.h"

#include <cstring>

namespace weir::tools {

Result<std::unique_ptr<TraceMaskSource>> TraceMaskSource::Open(const std::string& path,
                                                               const sim::ModelShape& shape) {
  WEIR_ASSIGN_OR_RETURN(auto reader, format::TraceReader::Open(path));
  const format::TraceHeader& h = reader->header();
  bool routing = !h.kinds.empty();
  for (const format::TraceKind& k : h.kinds) routing = routing && k.name == sim::kExpertUnitsKind;
  const bool project = routing && static_cast<int>(h.n_layers) < shape.n_layers && h.n_layers > 0;
  if (static_cast<int>(h.n_layers) != shape.n_layers && !project) {
    return Status::InvalidArgument(StrFormat(
        "%s: the trace has %u layers, model '%s' has %d (only a routing trace may have fewer "
        "layers than the model; it is then cycled over the model's layers)",
        path.c_str(), h.n_layers, shape.name.c_str(), shape.n_layers));
  }
  if (reader->n_tokens() == 0) {
    return Status::InvalidArgument(StrFormat("%s: the trace holds no token", path.c_str()));
  }
  std::unique_ptr<TraceMaskSource> src(new TraceMaskSource());
  src->layout_.n_layers = shape.n_layers;
  if (project) {
    src->projection_ = StrFormat(" (%u trace layers cycled over %d)", h.n_layers, shape.n_layers);
  }
  for (uint32_t l = 0; l < static_cast<uint32_t>(shape.n_layers); ++l) {
    const uint32_t tl = l % h.n_layers;
    for (uint32_t k = 0; k < h.kinds.size(); ++k) {
      uint32_t units = h.kinds[k].units[tl];
      if (units == 0) continue;
      auto stream = sim::MakeMaskStream(shape, static_cast<int>(l), h.kinds[k].name, units,
                                        h.kinds[k].weights_per_unit);
      if (!stream.ok()) return stream.status().WithContext(path);
      src->layout_.streams.push_back(std::move(*stream));
      src->blocks_.push_back({tl, k});
    }
  }
  src->reader_ = std::move(reader);
  return src;
}

Result<bool> TraceMaskSource::Next(sim::TokenMasks* out) {
  WEIR_ASSIGN_OR_RETURN(bool more, reader_->Next(&token_));
  if (!more) return false;
  const bool events = reader_->header().has_cache_events;
  out->masks.resize(layout_.streams.size());
  if (events) {
    out->events.resize(layout_.streams.size());
  } else {
    out->events.clear();
  }
  for (size_t i = 0; i < layout_.streams.size(); ++i) {
    const auto [l, k] = blocks_[i];
    const uint32_t units = layout_.streams[i].n_units;
    sim::UnitMask& m = out->masks[i];
    if (m.size() != units) m.Resize(units);
    // Packed LSB-first bytes are the little-endian bytes of the 64-bit words.
    const uint8_t* bits = token_.mask(l, k);
    std::vector<uint64_t>& words = m.words();
    std::fill(words.begin(), words.end(), 0);
    const size_t n = format::MaskBytes(units);
    for (size_t b = 0; b < n; ++b) words[b / 8] |= static_cast<uint64_t>(bits[b]) << (8 * (b % 8));
    if (events) {
      format::CacheEvents e = token_.events(l, k);
      out->events[i] = {e.hits, e.misses, e.evictions, e.bytes_read};
    }
  }
  return true;
}

}  // namespace weir::tools
