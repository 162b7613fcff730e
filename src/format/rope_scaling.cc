#include "format/rope_scaling.h"

#include <cmath>

namespace weir::format {

Result<std::vector<float>> Llama3RopeFreqs(const Llama3RopeScaling& s, double base, int dim,
                                           const std::string& where) {
  auto bad = [&](const char* field, double v, const char* want) {
    return Status::InvalidArgument(StrFormat("%s: llama3 RoPE scaling %s = %g; it must be %s",
                                             where.c_str(), field, v, want));
  };
  if (!std::isfinite(s.factor) || s.factor <= 0) return bad("factor", s.factor, "> 0");
  if (!std::isfinite(s.low_freq_factor) || s.low_freq_factor <= 0) {
    return bad("low_freq_factor", s.low_freq_factor, "> 0");
  }
  if (!std::isfinite(s.high_freq_factor) || s.high_freq_factor <= s.low_freq_factor) {
    return bad("high_freq_factor", s.high_freq_factor, "finite and > low_freq_factor");
  }
  if (!std::isfinite(s.original_max_position_embeddings) ||
      s.original_max_position_embeddings <= 0) {
    return bad("original_max_position_embeddings", s.original_max_position_embeddings, "> 0");
  }
  if (!std::isfinite(base) || base <= 1) return bad("base (rope_theta)", base, "> 1");
  if (dim <= 0 || dim % 2 != 0) return bad("dim (head_dim)", dim, "even and > 0");
  const double ctx = s.original_max_position_embeddings;
  const double low_wavelen = ctx / s.low_freq_factor;    // longer: scaled by `factor`
  const double high_wavelen = ctx / s.high_freq_factor;  // shorter: kept
  std::vector<float> out(static_cast<size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    const double freq = std::pow(base, -2.0 * i / dim);
    const double wavelen = 2.0 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = s.factor;
    } else {
      const double smooth =
          (ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

}  // namespace weir::format
