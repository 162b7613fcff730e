// WritePack: writes any loaded Llama model as a weir pack (layout in weir_pack_format.h): the
// static tensors whole, the MLP weights as neuron bundles interleaved by (channel, layer,
// operator) within layer groups (or, with layout kColumns, as input-channel and neuron columns
// for sparse streaming), every tensor 4 KiB-aligned. Streams through GgufWriter (a few
// MiB of buffers plus one layer group's ffn_down^T rows), writes path.tmp and renames it.
// Deterministic: the same model and options always give the same bytes (no time stamps, no
// directories in the metadata, no threads deciding any order).
//
// Thread safety: a free function; the model is only read.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "format/model_file.h"
#include "format/weir_pack_format.h"
#include "tensor/dtype.h"

namespace weir::format {

struct PackOptions {
  int group_size = 1;         // layers per group (--group), 1..kMaxPackGroupSize
  std::optional<DType> type;  // convert every 2-D weight to this type first (--type)
  PackLayout layout = PackLayout::kBundles;  // --layout bundles|columns
  // Bundles: tile the Q8_0 / Q4_0 chunks (weir.pack.tiled_bundles, weir_pack_format.h). Off
  // only to write the layout of packs made before it, which weir still reads (tests).
  bool tile_bundles = true;
  // Column layouts: activation scores per layer (n_layers vectors of d_model and of d_ff values,
  // e.g. how often each input channel / neuron was among the kept half on calibration text).
  // When given, each group stores its input channels and neurons hottest first (scores summed
  // over the group's layers), so that columns used together share pages and reads
  // (weir.pack.in_order.<g>, weir_pack_format.h). Empty: the natural order.
  std::vector<std::vector<double>> in_score, down_score;
  // Experts layout: per layer, a score per expert (how often calibration text routed to it).
  // When given, each layer's records are stored highest score first (ties: lower id;
  // weir.pack.expert_order.<l>), so that --policy hot keeps the hottest experts. Empty: natural.
  std::vector<std::vector<double>> expert_score;
  // Experts layout: store each expert's gate and up as channel records (gate^T and up^T rows of
  // each input channel) followed by W_down (kPackLayoutExpertColumns, weir_pack_format.h), for
  // sparsity inside streamed experts (`weir pack --layout experts-columns`).
  bool expert_columns = false;
};

// Errors: the model's own validation, a bad group size, MLP tensors of one group in different
// types (pass a type to convert them), d_model not whole blocks of the bundle type, I/O.
Status WritePack(const ModelFile& model, const std::string& path, const PackOptions& options,
                 const std::function<void(double)>& progress = nullptr);

// The experts layout of a mixture of experts (weir_pack_format.h), which WritePack writes for
// one: every tensor but the expert stacks as the source has it, then per layer the experts as
// page-aligned records. Refuses --type, --group other than 1 and the dense layouts.
Status WriteExpertPack(const ModelFile& model, const std::string& path, const PackOptions& options,
                       const std::function<void(double)>& progress = nullptr);

// Row c of w^T in type `out`, for a 2-D weight w [rows, cols] and c < cols: the column c of w
// (rows values, dequantized) quantized with QuantizeRow(out). Fills dst[c * RowBytes(out, rows)]
// for every c, i.e. the whole transposed matrix [cols, rows]. rows must be whole blocks of out.
// Exact for float types; a second rounding for Q8_0/Q4_0 (see weir_pack_format.h).
Status TransposeWeight(const TensorView& w, DType out, uint8_t* dst);

}  // namespace weir::format
