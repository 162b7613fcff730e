// The weir pack: a GGUF file whose MLP weights are laid out for streaming from storage
// (`weir pack`, docs/streaming.md). This header has the constants and the geometry that the
// writer (weir_pack_writer.h) and the reader (weir_pack_reader.h) share.
//
// Container. A GGUF v3 file (byte layout in format/gguf_reader.h) with general.alignment = 4096,
// so every tensor starts on a 4 KiB boundary and O_DIRECT can read any page-aligned range of it
// straight into page-aligned memory. Standard GGUF tools read the header and the tensor table.
//
// Metadata: every <arch>.* and tokenizer.ggml.* key of a normal weir GGUF of the architecture
// (AddLlamaGgufMetadata), then
//   weir.pack.version            u32        2
//   weir.pack.layout             string     "ffn_bundles:gate,up,down" or
//                                           "ffn_columns:gate_t,up_t;down_t" (see below)
//   weir.pack.group_size         u32        N asked for with --group
//   weir.pack.group_first_layer  u32[G]     first layer of each layer group
//   weir.pack.group_layer_count  u32[G]     layers in each group (1..N)
//   weir.pack.down_t             string     column layouts: "exact" (float types) or
//                                           "requantized" (Q8_0/Q4_0); bundles: "none"
//   weir.pack.source             string     file name (no directory) of the packed model
//   weir.pack.tiled_bundles      u32        1 (bundles): the chunks of
//                                           Q8_0/Q4_0 groups are tiled, see below; absent = 0
//   weir.pack.tiled_static       u32        1 (bundle packs): the static projections that
//                                           TiledStatic accepts (attention, output head) are
//                                           stored tiled by 16 rows (kernels/tiled.h); absent = 0
//   weir.pack.sliding_window     u32        a window the row's GGUF keys cannot state (a Hugging
//   weir.pack.sliding_layers     u32[L]     Face Mistral's), its layers (1 = sliding) and their
//   weir.pack.rope_freq_base_swa f32        RoPE base; absent: the GGUF keys decide
//
// Tensors, in this order:
//   the static tensors, whole, under their canonical names (format/model_file.h) and shapes:
//   every tensor of the architecture's table (format/arch_spec.h) but the MLP's gate, up and
//   down, in PackStaticTensorNames' order -- token_embd.weight, output_norm.weight,
//   output.weight (absent when tied), then per layer the row's tensors (attn_norm, the four
//   attention matrices attn_q, attn_k, attn_v, attn_output back to back, q/k/v biases, QK-norm,
//   post-norms, ffn_norm: what the row has), then rope_freqs.weight when the model has it.
//   Fused tensors (Phi-3's attn_qkv) are stored as their parts. The metadata are the row's GGUF
//   keys, so the streamed model computes the row's block;
//   then one bundle tensor per layer group g:
//     weir.ffn_bundles.<g>   type T   shape [d_ff * n * 3, d_model]    (n = layers in group)
//   made of chunks of kBundleChunk (32) consecutive neurons -- one Q8_0/Q4_0 block of
//   ffn_down's rows, which run along the neurons; the last chunk of a float type may be
//   narrower. Chunk k (neurons c0 = 32 k .. c0 + w) holds, for layer first + j of the group,
//   3 w rows starting at row (c0 * n + j * w) * 3:
//     w rows    rows c0 .. c0 + w of blk.L.ffn_gate.weight   (quantized blocks as stored)
//     w rows    rows c0 .. c0 + w of blk.L.ffn_up.weight
//     w rows'   bytes: for each output r < d_model, the piece W_down[r, c0 .. c0 + w) of
//               blk.L.ffn_down.weight, RowBytes(T, w) bytes (one whole block for Q8_0/Q4_0)
//   (RowBytes(T, w) * d_model = w * RowBytes(T, d_model) for every type weir packs). So a
//   chunk's bundle -- gate, up and down of its neurons for every layer of the group -- is one
//   contiguous run of 3 w n rows ("channel, layer, operator" order, ActiveFlow §3): one read
//   fetches the same neurons for n layers, and neuron c's weights start at byte c * 3 n
//   row_bytes when c is a chunk's first. Every byte is the source's (or its --type conversion,
//   row by row): nothing is requantized, and the down product is a row-form dot per chunk
//   (kernels::ChunkedMatVec) with the numerics of the dense MatVec over W_down.
// Tiled bundles (weir.pack.tiled_bundles = 1, groups of type Q8_0/Q4_0 with d_model a multiple
// of 16, TiledBundles): each of a chunk's three pieces above -- the [32, d_model] gate rows, the
// [32, d_model] up rows, the [d_model, 32] down pieces -- is stored tiled by 16 rows
// (kernels/tiled.h: per 16 rows and block, the 16 scales then the quants interleaved 4 bytes per
// row), the same bytes in another order at the same place. The down pieces then hold, per 16
// outputs, 32 bytes of scales and 256 / 512 bytes of quants: one block column per chunk, which
// kernels::DotTiledChunks walks chunk by chunk.
// The streaming engine reads page-aligned blocks of a bundle tensor, each of which is inside
// the file because the tensor starts page-aligned and the GGUF padding after it (or the end of
// the file) completes its last page. (Pack version 1 stored ffn_down^T rows, requantized, per
// neuron; it is refused with a message to repack.)
//
// Column layout (`weir pack --layout columns`, for dynamic sparsity: DIP, DIP-CA, GLU pruning).
// Instead of one bundle tensor, each layer group g has two:
//     weir.ffn_in.<g>     type T   shape [d_model * n * 2, d_ff]
//   whose row (i * n + j) * 2 + op holds column i of blk.L.ffn_gate.weight (op 0) or of
//   blk.L.ffn_up.weight (op 1), L = first + j, i.e. row i of ffn_gate^T / ffn_up^T: the weights
//   that input channel i of the MLP feeds, for n layers back to back (channel, layer, operator);
//     weir.ffn_down.<g>   type T   shape [d_ff * n, d_model]
//   whose row c * n + j is row c of blk.L.ffn_down^T (the weights neuron c feeds).
// A policy that keeps input channel i reads only its 2 rows of ffn_in for that layer, and one
// that keeps neuron c only its row of ffn_down: bytes read are proportional to the kept
// columns. ffn_down comes first in the file, then ffn_in. Both transposes follow the numerics of
// ffn_down^T below (requantized for Q8_0/Q4_0: the same rounding as the session's transposed
// copies, model/transposed_weights.h), so d_ff must also be whole blocks of T.
//
// Sparse column layout (`weir pack --layout sparse-columns`, for models pruned without
// structure: `weir prune --mode unstructured`, Mosaic §3.1). The two tensors of the column
// layout, same names and row order, are byte tensors (ggml I8, shape [pages, 4096]) holding
//   u64 offsets[rows + 1]      byte offset of each record from the tensor's first byte:
//                              offsets[0] = 8 * (rows + 1), ascending, offsets[rows] <= size
//   record r:  u64 bitmap[ceil(len / 64)]   bit k (word k / 64, bit k % 64) set when value k
//                                           of the row is not zero
//              the row's non-zero values in order, zero-padded to whole blocks of T, in T
// with len = d_ff for ffn_in rows and d_model for ffn_down rows, and T = weir.pack.sparse_type.
// A row with no non-zero value is its bitmap alone. The values are quantized once, from the
// source weights (dequantized); a pruned model streams (and caches) only its non-zero weights
// plus one bit per weight.
//
// Experts layout (`weir pack` of a mixture of experts: Mixtral, Qwen3 MoE; docs/moe.md). The
// static tensors are every tensor of the model but the expert stacks -- attention, norms, the
// router ffn_gate_inp, embeddings -- under their names, types and RoPE layout as the source has
// them; then one byte tensor per layer l (ggml I8, shape [pages, 4096]):
//     weir.ffn_experts.<l>   n_expert records of expert_stride bytes, expert e at e * stride
//                            (with an expert order, expert expert_order[r] in record r):
//       gate_e  ffn_gate_exps[e] [d_ff, d_model]   rows as stored (type expert_types[0])
//       up_e    ffn_up_exps[e]   [d_ff, d_model]   (expert_types[1])
//       down_e  ffn_down_exps[e] [d_model, d_ff]   (expert_types[2])
//   each part starting on a page boundary inside the record, zeros between; stride = the three
//   parts' sizes each rounded up to 4 KiB. So an expert is one page-aligned read, the unit the
//   streaming engine caches (model/streaming_weights.h), and its bytes are the source's.
//   weir.pack.expert_types   u32[3]   ggml type ids of gate, up, down.
//   weir.pack.expert_order.<l>  i32[n_expert]  optional (weir pack --calib): the expert whose
//                            record is r-th, the most often routed first on calibration text, so
//                            that --policy hot (the lowest records stay) keeps each layer's
//                            hottest experts. A permutation; absent: record r is expert r.
// Groups are single layers (group_size 1), d_ff the expert width.
//
// Experts layout with channel records (`weir pack --layout experts-columns`, for sparsity inside
// streamed experts: docs/moe.md "Sparsity inside streamed experts"). weir.pack.layout is
// "ffn_experts:gate_t+up_t;down" and each expert's record holds, instead of gate, up, down:
//       d_model channel records, channel i at i * channel_bytes from the record's start:
//         gate^T row i  [d_ff]  (column i of ffn_gate_exps[e], type expert_types[0])
//         up^T row i    [d_ff]  (column i of ffn_up_exps[e], type expert_types[1] = [0])
//       then down_e  ffn_down_exps[e] [d_model, d_ff], rows as stored (expert_types[2]), right
//       after the last channel record (at d_model * channel_bytes), padded with zeros to whole
//       channel records, then to the record's page-aligned stride.
//   channel_bytes = 2 * RowBytes(expert_types[0], d_ff). A policy that keeps input channel i of
//   an expert reads its one channel record (gate^T and up^T rows: on Mixtral 8x7B at Q4_0 16,128
//   bytes); W_down follows as a whole number of channel records, so the kept records and W_down
//   are records of one size from the expert's start and one compact read takes both
//   (storage/record_reader.h). The transposes follow the numerics of the column layouts
//   (exact for F32/F16/BF16; Q8_0/Q4_0 requantized by TransposeWeight, so d_ff must be whole
//   blocks); other types are refused (convert first). W_down's bytes are the source's.
//
// Numerics of ffn_down^T (column layouts): for F32/F16/BF16 the transpose is exact. Q8_0/Q4_0 blocks run along a
// row, so a column of ffn_down is not made of whole blocks: the packer dequantizes the column
// (d_model values) and quantizes it again with the reference QuantizeRow, i.e. 32 consecutive
// outputs of one neuron share a new scale. That is a second rounding (docs/streaming.md gives
// its measured size); gate and up rows are copied bit for bit.
//
// Thread safety: constants and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "format/model_file.h"
#include "tensor/dtype.h"

namespace weir::format {

inline constexpr uint32_t kPackVersion = 2;
inline constexpr uint32_t kPackAlignment = 4096;
inline constexpr char kPackLayout[] = "ffn_bundles:gate,up,down";
inline constexpr char kPackLayoutColumns[] = "ffn_columns:gate_t,up_t;down_t";
inline constexpr char kPackLayoutSparseColumns[] = "ffn_sparse_columns:gate_t,up_t;down_t";
inline constexpr char kPackSparseTypeKey[] = "weir.pack.sparse_type";
inline constexpr char kPackLayoutExperts[] = "ffn_experts:gate,up,down";
inline constexpr char kPackLayoutExpertColumns[] = "ffn_experts:gate_t+up_t;down";
inline constexpr char kPackExpertTypesKey[] = "weir.pack.expert_types";
inline constexpr int64_t kSparseTensorRowBytes = 4096;  // byte tensors are [pages, 4096]

inline constexpr char kPackVersionKey[] = "weir.pack.version";
inline constexpr char kPackLayoutKey[] = "weir.pack.layout";
inline constexpr char kPackGroupSizeKey[] = "weir.pack.group_size";
inline constexpr char kPackGroupFirstKey[] = "weir.pack.group_first_layer";
inline constexpr char kPackGroupCountKey[] = "weir.pack.group_layer_count";
inline constexpr char kPackDownTKey[] = "weir.pack.down_t";
inline constexpr char kPackSourceKey[] = "weir.pack.source";
inline constexpr char kPackTiledKey[] = "weir.pack.tiled_bundles";
inline constexpr char kPackTiledStaticKey[] = "weir.pack.tiled_static";
// Column packs written with an activation order (weir pack --calib): per layer group g, the
// input channels (d_model entries) and the neurons (d_ff entries) in file order, hottest first:
// weir.pack.in_order.<g>[s] is the channel whose gate^T / up^T rows sit at slot s. Absent: the
// natural order. Each must be a permutation of 0..n-1.
inline constexpr char kPackInOrderPrefix[] = "weir.pack.in_order.";
inline constexpr char kPackDownOrderPrefix[] = "weir.pack.down_order.";
inline constexpr char kPackExpertOrderPrefix[] = "weir.pack.expert_order.";

// A sliding window that the architecture's GGUF keys cannot state (a Hugging Face Mistral's: the
// llama row has no sliding layers): the window, one flag per layer (1 = sliding) and the RoPE base
// of sliding layers, applied by the pack reader. Absent: the GGUF keys alone decide.
inline constexpr char kPackSlidingWindowKey[] = "weir.pack.sliding_window";
inline constexpr char kPackSlidingLayersKey[] = "weir.pack.sliding_layers";
inline constexpr char kPackRopeThetaSlidingKey[] = "weir.pack.rope_freq_base_swa";

// Largest --group accepted (a bundle of more layers is never useful and keeps sizes small).
inline constexpr int kMaxPackGroupSize = 64;

// "weir.ffn_bundles.<g>"; the column layout's "weir.ffn_in.<g>" and "weir.ffn_down.<g>".
std::string PackBundleTensorName(int group);
std::string PackInputTensorName(int group);
std::string PackDownTensorName(int group);
std::string PackExpertTensorName(int layer);  // "weir.ffn_experts.<l>"

// How the MLP weights of a pack are laid out (the weir.pack.layout key).
enum class PackLayout : int { kBundles = 0, kColumns = 1, kSparseColumns = 2, kExperts = 3 };
// "bundles", "columns", "sparse-columns" or "experts" (the --layout names).
const char* PackLayoutName(PackLayout layout);
// True for the two column layouts.
inline bool IsColumnLayout(PackLayout l) {
  return l == PackLayout::kColumns || l == PackLayout::kSparseColumns;
}

// Reads and checks the offset table at the start of a sparse column byte tensor of `nbytes`
// holding `rows` records of `len` values: offsets[0] = 8 * (rows + 1), each record at least its
// bitmap, the last offset inside the tensor. `table` holds the tensor's first 8 * (rows + 1)
// bytes (the caller checks that many exist); the offsets go to *out. Corrupt names `what`.
Status ReadSparseOffsets(const uint8_t* table, int64_t rows, int64_t len, uint64_t nbytes,
                         const std::string& what, std::vector<uint64_t>* out);

// Encodes row[0..len) as a sparse column record (kernels/sparse_column.h gives its size,
// SparseRecordBytes(t, len, nnz) with nnz the number of non-zero values) into out.
void EncodeSparseRecord(DType t, const float* row, int64_t len, uint8_t* out);

// The operators of a column-layout input record, in storage order.
enum class ColumnOp : int { kGateT = 0, kUpT = 1 };

// The operators inside a bundle chunk, in storage order.
enum class BundleOp : int { kGate = 0, kUp = 1, kDown = 2 };
inline constexpr int kBundleOps = 3;
// Neurons per bundle chunk (one Q8_0/Q4_0 block of an ffn_down row).
inline constexpr int kBundleChunk = 32;

// One layer group's MLP tensors: the bundle tensor (kBundles), or the down and input tensors
// (kColumns; offset/nbytes/row_bytes then describe weir.ffn_down.<g> and in_* weir.ffn_in.<g>).
struct PackGroup {
  int index = 0;
  int first_layer = 0;
  int n_layers = 0;  // layers in this group
  int d_ff = 0;      // channels (equal for every layer of the group)
  int d_model = 0;
  DType dtype = DType::kF32;
  uint64_t offset = 0;      // absolute file offset of the tensor's first byte (page-aligned)
  uint64_t nbytes = 0;      // d_ff * bundle_bytes
  size_t row_bytes = 0;     // RowBytes(dtype, d_model)
  size_t bundle_bytes = 0;  // n_layers * 3 * row_bytes per neuron: chunk c0 starts at
                            // offset + c0 * this (kColumns: n_layers * row_bytes, channel c of
                            // ffn_down)
  PackLayout layout = PackLayout::kBundles;
  // Bundles: the chunk's three pieces are tiled by 16 rows (TiledBundles below).
  bool tiled = false;
  // Column layouts only: weir.ffn_in.<g> (kSparseColumns: offsets and nbytes are those of the
  // byte tensors; row_bytes and in_row_bytes stay the dense rows' sizes).
  uint64_t in_offset = 0;
  uint64_t in_nbytes = 0;     // d_model * n_layers * 2 * in_row_bytes
  size_t in_row_bytes = 0;    // RowBytes(dtype, d_ff)
  // kExperts: n_expert records of expert_stride bytes (offset/nbytes: the layer's tensor); the
  // byte offset of gate, up and down inside a record and their types.
  int n_expert = 0;
  uint64_t expert_stride = 0;
  uint64_t expert_part[3] = {0, 0, 0};
  DType expert_type[3] = {DType::kF32, DType::kF32, DType::kF32};
  // kExperts with channel records (kPackLayoutExpertColumns): expert_part[0] = 0 (channel 0's
  // gate^T row), expert_part[1] = its up^T row, expert_part[2] = W_down at d_model *
  // channel_bytes; channel i's record at i * channel_bytes; W_down spans down_records records.
  bool expert_columns = false;
  uint64_t channel_bytes = 0;
  int64_t down_records = 0;
  // kExperts with an expert order (kPackExpertOrderPrefix): record -> expert, and the inverse;
  // empty for the natural order.
  std::vector<int32_t> expert_order, expert_record;
  // The record holding expert e, and the expert in record r.
  int64_t ExpertRecord(int64_t e) const {
    return expert_record.empty() ? e : expert_record[static_cast<size_t>(e)];
  }
  int64_t ExpertInRecord(int64_t r) const {
    return expert_order.empty() ? r : expert_order[static_cast<size_t>(r)];
  }
  // kColumns with an activation order (kPackInOrderPrefix): slot -> channel / neuron, and the
  // inverses; all empty for the natural order.
  std::vector<int32_t> in_order, down_order, in_slot, down_slot;

  // Every streamed MLP byte of the group.
  uint64_t mlp_bytes() const { return nbytes + in_nbytes; }
  // kColumns: rows of weir.ffn_in.<g> and weir.ffn_down.<g>, and where a layer's rows are.
  int64_t in_rows() const { return int64_t{d_model} * n_layers * 2; }
  int64_t down_rows() const { return int64_t{d_ff} * n_layers; }
  int64_t InRow(int64_t i, int j, ColumnOp op) const { return InRowAtSlot(InSlot(i), j, op); }
  // The row of layer j's `op` in the record at slot s (a span read's compact copy numbers its
  // records 0, 1, ... in slot order and uses the same formula).
  int64_t InRowAtSlot(int64_t s, int j, ColumnOp op) const {
    return (s * n_layers + j) * 2 + static_cast<int>(op);
  }
  int64_t DownRow(int64_t c, int j) const { return DownSlot(c) * n_layers + j; }
  // Where channel i / neuron c sits in the file's order, and which one sits at slot s.
  int64_t InSlot(int64_t i) const { return in_slot.empty() ? i : in_slot[static_cast<size_t>(i)]; }
  int64_t DownSlot(int64_t c) const {
    return down_slot.empty() ? c : down_slot[static_cast<size_t>(c)];
  }
  int64_t InChannelAt(int64_t s) const {
    return in_order.empty() ? s : in_order[static_cast<size_t>(s)];
  }
  int64_t DownNeuronAt(int64_t s) const {
    return down_order.empty() ? s : down_order[static_cast<size_t>(s)];
  }

  int64_t rows() const { return int64_t{d_ff} * n_layers * kBundleOps; }
  // Bundles: neurons in the chunk starting at c0 (a multiple of kBundleChunk).
  int chunk_width(int64_t c0) const {
    return static_cast<int>(d_ff - c0 < kBundleChunk ? d_ff - c0 : kBundleChunk);
  }
  // Bundles: first of the chunk_width(c0) rows of `op` of layer first_layer + j in chunk c0
  // (for kDown, the rows' bytes hold the d_model pieces of W_down, see above).
  int64_t ChunkRow(int64_t c0, int j, BundleOp op) const {
    const int64_t w = chunk_width(c0);
    return (c0 * n_layers + j * w) * kBundleOps + static_cast<int>(op) * w;
  }
  // Bundles: the row of neuron c's gate or up weights (op kGate or kUp) of layer first + j.
  int64_t Row(int64_t c, int j, BundleOp op) const {
    const int64_t c0 = c / kBundleChunk * kBundleChunk;
    return ChunkRow(c0, j, op) + (c - c0);
  }
  bool Contains(int layer) const { return layer >= first_layer && layer < first_layer + n_layers; }
};

// kExperts: sets expert_part and expert_stride from n_expert, d_ff, d_model and expert_type, and
// nbytes = n_expert * stride; InvalidArgument when a row is not whole blocks or sizes overflow.
Status FinishExpertGroup(PackGroup* g);
// With g->expert_columns the channel-record geometry (above); InvalidArgument unless gate and
// up share a type of F32, F16, BF16, Q8_0 or Q4_0 and d_ff is whole blocks of it.
// Layer `layer`'s group of an experts pack of model `c` whose records hold `types` (gate, up,
// down; with `columns`, the channel records' type twice, then down's), finished; what
// FinishExpertGroup refuses.
Result<PackGroup> ExpertGroup(const LlamaConfig& c, int layer, const DType types[3],
                              bool columns = false);

// Whether a bundle group of a pack written with weir.pack.tiled_bundles = 1 has tiled chunks:
// Q8_0 / Q4_0 with d_model a multiple of 16 (then every chunk is 32 neurons wide).
inline bool TiledBundles(const PackGroup& g) {
  return g.layout == PackLayout::kBundles && (g.dtype == DType::kQ8_0 || g.dtype == DType::kQ4_0) &&
         g.d_model % 16 == 0;
}

// Whether a static tensor of a pack written with weir.pack.tiled_static = 1 is stored tiled
// (Layout::kTiled16): attn_q/k/v/output and output.weight of type Q8_0 / Q4_0 whose rows are a
// multiple of 16. They are only ever multiplied densely (a streamed pack prunes MLP columns only).
bool TiledStatic(const std::string& name, DType dtype, const Shape& shape);

// Splits layers 0..n_layers-1 into groups of up to `group_size` consecutive layers; a group
// also ends where d_ff changes (bundles of one group share a channel count). Returns
// (first_layer, n_layers) pairs. group_size must be in [1, kMaxPackGroupSize].
std::vector<std::pair<int, int>> PlanPackGroups(const LlamaConfig& config, int group_size);

// Sets a group's order (slot -> index) and its inverse from `order`; InvalidArgument unless it is
// a permutation of 0..n-1 (`what` names it in the message). An empty order means natural order.
Status SetPackOrder(const std::vector<int32_t>& order, int64_t n, const char* what,
                    std::vector<int32_t>* order_out, std::vector<int32_t>* slot_out);
// The order that puts higher scores first (ties: lower index first).
std::vector<int32_t> OrderByScore(const std::vector<double>& score);

// Fills the derived fields of a group (row_bytes, bundle_bytes, nbytes; in_* for kColumns) from
// its dims, layout and dtype; InvalidArgument when d_model (kColumns: or d_ff) is not whole
// blocks of dtype or the sizes overflow.
Status FinishPackGroup(PackGroup* group);

// The type of a dense pack's MLP tensors for a layer group whose gate, up and down tensors have
// the types `sources`: `forced` when given (--type); else the sources' one type when they agree
// and its blocks divide a bundle chunk (32 values: the float types and the 32-value quantized
// types); else F32 when they are all float types, and otherwise Q8_0, the 32-value type that
// loses least (a Gemma 3 Q4_K_M file mixes Q5_0 gate and up with Q6_K or Q4_K down, whose
// 256-value blocks a 32-neuron chunk cannot hold).
DType PackMlpType(const std::vector<DType>& sources, std::optional<DType> forced);

// Whether a tensor of this role is held by a dense pack's MLP tensors (gate, up, down) rather
// than stored as a static tensor.
bool IsPackedMlpRole(TensorRole role);

// The static tensors of a dense pack in pack order, from the architecture's tensor table: every
// tensor of the row but the MLP's gate, up and down (fused tensors under their parts' names, as
// the loader splits them); the embedding, the other global tensors, then layer by layer the
// row's tensors in table order with the four attention matrices (q, k, v, output) back to back,
// and the RoPE factors (Llama 3.1's rope_freqs.weight) last. An optional tensor is listed when
// `present(name)`; a required one always (the reader reports it missing); output.weight not
// when the head is tied.
std::vector<std::string> PackStaticTensorNames(
    const LlamaConfig& config, const std::function<bool(const std::string&)>& present);

}  // namespace weir::format
