// RoPE frequency factors as Llama 3.1 defines them (Hugging Face's rope_type "llama3", which
// llama.cpp's converter stores as the tensor rope_freqs.weight): the frequencies of a head's
// pairs are divided by a factor that is 1 for short wavelengths, `factor` for long ones, and
// blends between the two in a band around the original context length.
//
// For pair i < dim/2 with frequency f_i = base^(-2i/dim) and wavelength w_i = 2 pi / f_i:
//   w_i < original_ctx / high_freq_factor   ->  1
//   w_i > original_ctx / low_freq_factor    ->  factor
//   otherwise, with s = (original_ctx / w_i - low_freq_factor) / (high_freq_factor -
//   low_freq_factor):  1 / ((1 - s) / factor + s)
// The angle of pair i at position p is then p * f_i / factor_i (kernels::Rope).
//
// Thread safety: free functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace weir::format {

struct Llama3RopeScaling {
  double factor = 8.0;  // Llama 3.1's values (its config.json rope_scaling)
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// The dim/2 factors for RoPE base `base` over `dim` rotated dimensions. InvalidArgument (naming
// `where` and the field) unless factor > 0, 0 < low_freq_factor < high_freq_factor,
// original_max_position_embeddings > 0, all finite, base > 1 and dim even and > 0.
Result<std::vector<float>> Llama3RopeFreqs(const Llama3RopeScaling& scaling, double base, int dim,
                                           const std::string& where);

}  // namespace weir::format
