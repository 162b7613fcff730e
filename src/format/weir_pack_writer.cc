#include "format/weir_pack_writer.h"

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "format/gguf_writer.h"
#include "format/llama_gguf_writer.h"
#include "format/weir_pack_format.h"
#include "kernels/sparse_column.h"
#include "kernels/tiled.h"
#include "tensor/quantize.h"

namespace weir::format {

namespace {

// Row r of attn_q/attn_k as written for adjacent-pair RoPE comes from this row of a rotate-half
// source (the same permutation WriteLlamaGguf applies; see llama_gguf_writer.h).
int64_t AdjacentPairSourceRow(int64_t r, int head_dim, int rope_dim) {
  const int64_t head = r / head_dim, j = r % head_dim;
  if (j >= rope_dim) return r;
  const int64_t src = (j % 2 == 0) ? j / 2 : j / 2 + rope_dim / 2;
  return head * head_dim + src;
}

// Values [c0, c0 + width) of row `row` of w as floats, for any type: the blocks that cover the
// range are dequantized and the range cut out of them (a K-quant's 256-value blocks do not start
// at every multiple of 32).
void DequantizeRange(const TensorView& w, int64_t row, int64_t c0, int64_t width, float* out,
                     std::vector<float>* scratch) {
  const int64_t bs = BlockSize(w.dtype);
  const int64_t b0 = c0 / bs * bs, b1 = (c0 + width + bs - 1) / bs * bs;
  if (b0 == c0 && b1 == c0 + width) {
    DequantizeRow(w.dtype, w.row(row) + RowBytes(w.dtype, c0), out, width);
    return;
  }
  scratch->resize(static_cast<size_t>(b1 - b0));
  DequantizeRow(w.dtype, w.row(row) + RowBytes(w.dtype, b0), scratch->data(), b1 - b0);
  std::memcpy(out, scratch->data() + (c0 - b0), static_cast<size_t>(width) * sizeof(float));
}

// Copies row `src_row` of `src` into dst as type `out` (bit for bit when the types agree).
void ConvertRow(const TensorView& src, int64_t src_row, DType out, uint8_t* dst,
                std::vector<float>* tmp) {
  const int64_t cols = src.cols();
  if (out == src.dtype) {
    std::memcpy(dst, src.row(src_row), src.row_bytes());
    return;
  }
  tmp->resize(static_cast<size_t>(cols));
  DequantizeRow(src.dtype, src.row(src_row), tmp->data(), cols);
  QuantizeRow(out, tmp->data(), dst, cols);
}

struct SparseTensor;

// What one layer group's bundle tensor is made of, and its ffn_down^T rows once built.
struct GroupSource {
  PackGroup group;
  std::vector<TensorView> gate, up, down;    // per layer of the group
  std::vector<std::vector<uint8_t>> down_t;  // per layer: [d_ff, row_bytes], built lazily
  std::vector<std::vector<uint8_t>> gate_t, up_t;  // per layer: [d_model, in_row_bytes]
  std::shared_ptr<SparseTensor> sparse_down, sparse_in;  // sparse column layout
};

// Fills *out (once) with the transposes of `ws` in the group's type.
Status Transposes(const std::vector<TensorView>& ws, DType type,
                  std::vector<std::vector<uint8_t>>* out) {
  if (!out->empty()) return Status::Ok();
  out->resize(ws.size());
  for (size_t j = 0; j < ws.size(); ++j) {
    (*out)[j].resize(static_cast<size_t>(ws[j].cols()) * RowBytes(type, ws[j].rows()));
    WEIR_RETURN_IF_ERROR(TransposeWeight(ws[j], type, (*out)[j].data()));
  }
  return Status::Ok();
}

// Column layout: rows [begin, end) of weir.ffn_down.<g> (row c * n + j = row c of down_j^T).
Status FillDown(GroupSource* s, int64_t begin, int64_t end, uint8_t* dst) {
  const PackGroup& g = s->group;
  WEIR_RETURN_IF_ERROR(Transposes(s->down, g.dtype, &s->down_t));
  for (int64_t r = begin; r < end; ++r) {
    const int64_t c = g.DownNeuronAt(r / g.n_layers);
    const size_t j = static_cast<size_t>(r % g.n_layers);
    std::memcpy(dst + static_cast<size_t>(r - begin) * g.row_bytes,
                s->down_t[j].data() + static_cast<size_t>(c) * g.row_bytes, g.row_bytes);
  }
  if (end == g.down_rows()) s->down_t.clear();
  return Status::Ok();
}

// Column layout: rows [begin, end) of weir.ffn_in.<g> (row (i * n + j) * 2 + op = row i of
// gate_j^T or up_j^T).
Status FillInput(GroupSource* s, int64_t begin, int64_t end, uint8_t* dst) {
  const PackGroup& g = s->group;
  WEIR_RETURN_IF_ERROR(Transposes(s->gate, g.dtype, &s->gate_t));
  WEIR_RETURN_IF_ERROR(Transposes(s->up, g.dtype, &s->up_t));
  const size_t rb = g.in_row_bytes;
  for (int64_t r = begin; r < end; ++r) {
    const int64_t i = g.InChannelAt(r / (int64_t{g.n_layers} * 2));
    const size_t j = static_cast<size_t>((r / 2) % g.n_layers);
    const auto& src = (r % 2 == 0) ? s->gate_t[j] : s->up_t[j];
    std::memcpy(dst + static_cast<size_t>(r - begin) * rb, src.data() + static_cast<size_t>(i) * rb,
                rb);
  }
  if (end == g.in_rows()) {
    s->gate_t.clear();
    s->up_t.clear();
  }
  return Status::Ok();
}

// Non-zero values of each column of w.
std::vector<int64_t> ColumnNonZeros(const TensorView& w) {
  std::vector<int64_t> nnz(static_cast<size_t>(w.cols()), 0);
  std::vector<float> row(static_cast<size_t>(w.cols()));
  for (int64_t r = 0; r < w.rows(); ++r) {
    DequantizeRow(w, r, row.data());
    for (int64_t c = 0; c < w.cols(); ++c) nnz[static_cast<size_t>(c)] += row[c] != 0.0f;
  }
  return nnz;
}

// Sparse column layout: one byte tensor (offsets, then records) whose record r is the row
// column_of(r) (a column of one of `ws`, see weir_pack_format.h). Sizes are planned first from
// the non-zero counts; the bytes are encoded when the writer asks for them.
struct SparseTensor {
  DType type = DType::kF32;
  int64_t len = 0;                                     // values per record
  std::vector<TensorView> ws;                          // the matrices whose columns are records
  std::function<std::pair<size_t, int64_t>(int64_t)> column_of;  // record -> (matrix, column)
  std::vector<uint64_t> offsets;                       // rows + 1
  uint64_t pages = 0;
  std::vector<uint8_t> blob;                           // built on the first fill

  void Plan(int64_t rows) {
    std::vector<std::vector<int64_t>> nnz;
    for (const TensorView& w : ws) nnz.push_back(ColumnNonZeros(w));
    offsets.assign(static_cast<size_t>(rows) + 1, 0);
    offsets[0] = 8 * (static_cast<uint64_t>(rows) + 1);
    for (int64_t r = 0; r < rows; ++r) {
      const auto [m, c] = column_of(r);
      offsets[static_cast<size_t>(r) + 1] =
          offsets[static_cast<size_t>(r)] + kernels::SparseRecordBytes(type, len, nnz[m][static_cast<size_t>(c)]);
    }
    pages = (offsets.back() + kSparseTensorRowBytes - 1) / kSparseTensorRowBytes;
  }
  Status Fill(int64_t page_begin, int64_t page_end, uint8_t* dst) {
    if (blob.empty()) {
      blob.assign(pages * kSparseTensorRowBytes, 0);
      std::memcpy(blob.data(), offsets.data(), 8 * offsets.size());
      std::vector<std::vector<float>> t;  // w^T as floats (exact: TransposeWeight to F32)
      for (const TensorView& w : ws) {
        t.emplace_back(static_cast<size_t>(w.rows() * w.cols()));
        WEIR_RETURN_IF_ERROR(
            TransposeWeight(w, DType::kF32, reinterpret_cast<uint8_t*>(t.back().data())));
      }
      const int64_t rows = static_cast<int64_t>(offsets.size()) - 1;
      for (int64_t r = 0; r < rows; ++r) {
        const auto [m, c] = column_of(r);
        EncodeSparseRecord(type, t[m].data() + c * len, len, blob.data() + offsets[static_cast<size_t>(r)]);
      }
    }
    const size_t at = static_cast<size_t>(page_begin) * kSparseTensorRowBytes;
    std::memcpy(dst, blob.data() + at, static_cast<size_t>(page_end - page_begin) * kSparseTensorRowBytes);
    if (static_cast<uint64_t>(page_end) == pages) blob = {};
    return Status::Ok();
  }
};

// Bundles: rows [begin, end) of weir.ffn_bundles.<g>, chunk by chunk (weir_pack_format.h).
Status FillBundles(GroupSource* s, int64_t begin, int64_t end, uint8_t* dst) {
  const PackGroup& g = s->group;
  const int64_t n = g.n_layers;
  std::vector<float> tmp, scratch;
  std::vector<uint8_t> piece;  // one chunk's piece of one operator (w rows' bytes), when needed
  std::vector<uint8_t> tiled;  // the same, tiled (TiledBundles)
  int64_t r = begin;
  while (r < end) {
    // The chunk holding row r: chunks before c0 take 3 n rows per neuron.
    const int64_t c0 = r / (n * kBundleOps) / kBundleChunk * kBundleChunk;
    const int64_t w = g.chunk_width(c0);
    const int64_t in_chunk = r - c0 * n * kBundleOps;
    const int j = static_cast<int>(in_chunk / (kBundleOps * w));
    const auto op = static_cast<BundleOp>(in_chunk / w % kBundleOps);
    const int64_t op_first = g.ChunkRow(c0, j, op);
    const int64_t op_end = std::min(op_first + w, end);
    uint8_t* d = dst + static_cast<size_t>(r - begin) * g.row_bytes;
    // The operator's w rows' bytes, built whole (a range may start or end inside them).
    piece.resize(static_cast<size_t>(w) * g.row_bytes);
    TensorView piece_view;
    if (op == BundleOp::kDown) {
      // The d_model pieces W_down[row, c0 .. c0 + w), converted piece by piece (blocks of 32
      // start at c0, so this equals converting the whole row and slicing it).
      const TensorView& down = s->down[static_cast<size_t>(j)];
      const size_t piece_bytes = RowBytes(g.dtype, w);
      tmp.resize(static_cast<size_t>(w));
      for (int64_t o = 0; o < g.d_model; ++o) {
        uint8_t* out = piece.data() + static_cast<size_t>(o) * piece_bytes;
        if (down.dtype == g.dtype) {
          std::memcpy(out, down.row(o) + RowBytes(down.dtype, c0), piece_bytes);
        } else {
          DequantizeRange(down, o, c0, w, tmp.data(), &scratch);
          QuantizeRow(g.dtype, tmp.data(), out, w);
        }
      }
      piece_view = TensorView{g.dtype, Shape{g.d_model, w}, piece.data()};
    } else {
      const TensorView& src = op == BundleOp::kGate ? s->gate[static_cast<size_t>(j)]
                                                     : s->up[static_cast<size_t>(j)];
      for (int64_t k = 0; k < w; ++k) {
        ConvertRow(src, c0 + k, g.dtype, piece.data() + static_cast<size_t>(k) * g.row_bytes, &tmp);
      }
      piece_view = TensorView{g.dtype, Shape{w, g.d_model}, piece.data()};
    }
    const uint8_t* bytes = piece.data();
    if (g.tiled) {
      tiled.resize(piece.size());
      kernels::TileRows(piece_view, tiled.data());
      bytes = tiled.data();
    }
    std::memcpy(d, bytes + static_cast<size_t>(r - op_first) * g.row_bytes,
                static_cast<size_t>(op_end - r) * g.row_bytes);
    r = op_end;
  }
  return Status::Ok();
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

Status TransposeWeight(const TensorView& w, DType out, uint8_t* dst) {
  if (w.shape.ndim != 2) {
    return Status::InvalidArgument(
        StrFormat("transpose: weight of shape %s is not 2-D", w.shape.ToString().c_str()));
  }
  const int64_t rows = w.rows(), cols = w.cols();
  if (rows % BlockSize(out) != 0) {
    return Status::InvalidArgument(StrFormat("transpose: %lld rows are not whole %s blocks of %d",
                                             static_cast<long long>(rows), DTypeName(out),
                                             BlockSize(out)));
  }
  // Tiles of kTile source columns: each source row is dequantized one block (or kTile floats) at
  // a time into tile[k][r], then every tile row is quantized as one output row.
  constexpr int64_t kTile = 32;
  const size_t out_row = RowBytes(out, rows);
  std::vector<float> tile(static_cast<size_t>(kTile * rows));
  std::vector<float> piece(kTile), scratch;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
    const int64_t width = std::min(kTile, cols - c0);
    for (int64_t r = 0; r < rows; ++r) {
      // c0 is a multiple of 32: one whole block of Q8_0/Q4_0, a part of a K-quant's block.
      DequantizeRange(w, r, c0, width, piece.data(), &scratch);
      for (int64_t k = 0; k < width; ++k)
        tile[static_cast<size_t>(k * rows + r)] = piece[static_cast<size_t>(k)];
    }
    for (int64_t k = 0; k < width; ++k) {
      QuantizeRow(out, tile.data() + k * rows, dst + static_cast<size_t>(c0 + k) * out_row, rows);
    }
  }
  return Status::Ok();
}

// Orders a column group's channels and neurons by the options' scores, summed over its layers.
Status OrderGroup(const PackOptions& options, const std::string& path, PackGroup* g) {
  if (!IsColumnLayout(g->layout)) {
    return Status::InvalidArgument(
        StrFormat("%s: an activation order applies to column layouts only (--layout columns or "
                  "sparse-columns)",
                  path.c_str()));
  }
  auto summed = [&](const std::vector<std::vector<double>>& score, int64_t width,
                    const char* what) -> Result<std::vector<double>> {
    std::vector<double> sum(static_cast<size_t>(width), 0.0);
    for (int j = 0; j < g->n_layers; ++j) {
      const size_t l = static_cast<size_t>(g->first_layer + j);
      if (l >= score.size() || static_cast<int64_t>(score[l].size()) != width) {
        return Status::InvalidArgument(StrFormat(
            "%s: %s scores of layer %zu: %zu values, expected %lld", path.c_str(), what, l,
            l < score.size() ? score[l].size() : size_t{0}, static_cast<long long>(width)));
      }
      for (int64_t i = 0; i < width; ++i) sum[static_cast<size_t>(i)] += score[l][static_cast<size_t>(i)];
    }
    return sum;
  };
  if (!options.in_score.empty()) {
    WEIR_ASSIGN_OR_RETURN(std::vector<double> s, summed(options.in_score, g->d_model, "input"));
    WEIR_RETURN_IF_ERROR(
        SetPackOrder(OrderByScore(s), g->d_model, "input order", &g->in_order, &g->in_slot));
  }
  if (!options.down_score.empty()) {
    WEIR_ASSIGN_OR_RETURN(std::vector<double> s, summed(options.down_score, g->d_ff, "neuron"));
    WEIR_RETURN_IF_ERROR(
        SetPackOrder(OrderByScore(s), g->d_ff, "neuron order", &g->down_order, &g->down_slot));
  }
  return Status::Ok();
}

Status WritePack(const ModelFile& model, const std::string& path, const PackOptions& options,
                 const std::function<void(double)>& progress) {
  WEIR_RETURN_IF_ERROR(ValidateLlama(model).WithContext(path));
  if (model.config.IsMoe()) return WriteExpertPack(model, path, options, progress);
  if (options.layout == PackLayout::kExperts) {
    return Status::InvalidArgument(path + ": --layout experts is for mixtures of experts; " +
                                   model.path + " is a dense model");
  }
  if (!options.expert_score.empty()) {
    return Status::InvalidArgument(path + ": an expert order is for mixtures of experts; " +
                                   model.path + " is a dense model");
  }
  if (options.group_size < 1 || options.group_size > kMaxPackGroupSize) {
    return Status::InvalidArgument(StrFormat("%s: group size %d is outside 1..%d", path.c_str(),
                                             options.group_size, kMaxPackGroupSize));
  }
  const LlamaConfig& c = model.config;
  auto tensor = [&](const std::string& name) { return *model.Find(name); };  // validated above

  // Static tensors: every tensor of the architecture's table but the MLP's, with the type and
  // RoPE permutation WriteLlamaGguf would write them with.
  struct StaticPlan {
    std::string name;
    TensorView src;
    DType out;
    bool permute;
  };
  std::vector<StaticPlan> statics;
  std::map<DType, uint64_t> bytes_by_type;
  const auto present = [&](const std::string& n) { return model.Find(n) != nullptr; };
  for (const std::string& n : PackStaticTensorNames(c, present)) {
    StaticPlan p{n, tensor(n), tensor(n).dtype, false};
    if (p.src.shape.ndim == 1) {
      p.out = DType::kF32;
    } else if (options.type && p.src.cols() % BlockSize(*options.type) == 0) {
      p.out = *options.type;
    }
    // Only where the source pairs RoPE otherwise than the architecture's GGUF files do (a
    // Hugging Face Llama).
    p.permute = c.rope_style == RopeStyle::kRotateHalf &&
                c.arch->rope_style == RopeStyle::kAdjacentPairs &&
                (n.ends_with(".attn_q.weight") || n.ends_with(".attn_k.weight"));
    if (p.permute && p.src.rows() % c.head_dim != 0) {
      return Status::InvalidArgument(StrFormat("%s: %s has shape %s, not whole heads of %d rows",
                                               path.c_str(), n.c_str(),
                                               p.src.shape.ToString().c_str(), c.head_dim));
    }
    if (p.src.shape.ndim == 2)
      bytes_by_type[p.out] += RowBytes(p.out, p.src.cols()) * static_cast<uint64_t>(p.src.rows());
    statics.push_back(std::move(p));
  }

  // Layer groups and their bundle type.
  std::vector<std::shared_ptr<GroupSource>> groups;
  const auto plan = PlanPackGroups(c, options.group_size);
  for (size_t gi = 0; gi < plan.size(); ++gi) {
    auto s = std::make_shared<GroupSource>();
    PackGroup& g = s->group;
    g.index = static_cast<int>(gi);
    g.first_layer = plan[gi].first;
    g.n_layers = plan[gi].second;
    g.d_ff = c.layers[static_cast<size_t>(g.first_layer)].d_ff;
    g.d_model = c.d_model;
    g.layout = options.layout;
    for (int j = 0; j < g.n_layers; ++j) {
      const std::string b = StrFormat("blk.%d.", g.first_layer + j);
      s->gate.push_back(tensor(b + "ffn_gate.weight"));
      s->up.push_back(tensor(b + "ffn_up.weight"));
      s->down.push_back(tensor(b + "ffn_down.weight"));
    }
    std::vector<DType> sources;
    for (int j = 0; j < g.n_layers; ++j) {
      for (const auto* ws : {&s->gate, &s->up, &s->down}) {
        sources.push_back((*ws)[static_cast<size_t>(j)].dtype);
      }
    }
    g.dtype = PackMlpType(sources, options.type);
    if (g.d_ff % BlockSize(g.dtype) != 0) {
      return Status::InvalidArgument(StrFormat("%s: d_ff %d of layer %d is not whole %s blocks",
                                               path.c_str(), g.d_ff, g.first_layer,
                                               DTypeName(g.dtype)));
    }
    g.tiled = options.tile_bundles && TiledBundles(g);
    WEIR_RETURN_IF_ERROR(FinishPackGroup(&g).WithContext(path));
    if (!options.in_score.empty() || !options.down_score.empty()) {
      WEIR_RETURN_IF_ERROR(OrderGroup(options, path, &g));
    }
    if (g.layout == PackLayout::kSparseColumns) {
      const int n = g.n_layers;
      const PackGroup order = g;  // the column_of functions map slots through its orders
      auto down = std::make_shared<SparseTensor>();
      down->type = g.dtype;
      down->len = g.d_model;
      down->ws = s->down;
      down->column_of = [n, order](int64_t r) {
        return std::pair<size_t, int64_t>(static_cast<size_t>(r % n), order.DownNeuronAt(r / n));
      };
      down->Plan(g.down_rows());
      auto in = std::make_shared<SparseTensor>();
      in->type = g.dtype;
      in->len = g.d_ff;
      for (int j = 0; j < n; ++j) {
        in->ws.push_back(s->gate[static_cast<size_t>(j)]);
        in->ws.push_back(s->up[static_cast<size_t>(j)]);
      }
      in->column_of = [n, order](int64_t r) {
        // row (s * n + j) * 2 + op -> matrix 2 j + op, column InChannelAt(s)
        return std::pair<size_t, int64_t>(static_cast<size_t>((r / 2) % n * 2 + r % 2),
                                          order.InChannelAt(r / (2 * int64_t{n})));
      };
      in->Plan(g.in_rows());
      g.nbytes = down->pages * kSparseTensorRowBytes;
      g.in_nbytes = in->pages * kSparseTensorRowBytes;
      s->sparse_down = std::move(down);
      s->sparse_in = std::move(in);
    }
    bytes_by_type[g.dtype] += g.mlp_bytes();
    groups.push_back(std::move(s));
  }
  DType main_type = DType::kF32;
  uint64_t best = 0;
  for (const auto& [t, b] : bytes_by_type) {
    if (b > best) best = b, main_type = t;
  }

  GgufWriter w(kPackAlignment);
  std::string name;
  for (const auto& [k, v] : model.metadata) {
    if (k == "general.name") name = v;
  }
  if (name.empty()) name = BaseName(model.path);
  if (name.empty()) name = "llama";
  LlamaConfig written = c;
  written.rope_style = c.arch->rope_style;
  // A sliding window on a row whose GGUF files have none (a Hugging Face Mistral's, on every
  // layer) goes into the pack's own keys, which the pack reader applies.
  const bool pack_window = c.sliding_window > 0 && c.arch->sliding_window_period == 0;
  if (pack_window) {
    written.sliding_window = 0;
    written.layer_sliding.clear();
  }
  WEIR_RETURN_IF_ERROR(
      AddLlamaGgufMetadata(written, model.tokenizer, name, LlamaFileType(main_type), &w)
          .WithContext(path));
  std::vector<uint32_t> firsts, counts;
  bool requantized = false;
  for (const auto& s : groups) {
    firsts.push_back(static_cast<uint32_t>(s->group.first_layer));
    counts.push_back(static_cast<uint32_t>(s->group.n_layers));
    requantized = requantized || IsQuantized(s->group.dtype);
  }
  w.AddU32(kPackVersionKey, kPackVersion);
  if (pack_window) {
    w.AddU32(kPackSlidingWindowKey, static_cast<uint32_t>(c.sliding_window));
    std::vector<uint32_t> flags;
    for (int l = 0; l < c.n_layers; ++l) flags.push_back(c.IsSliding(l) ? 1 : 0);
    w.Add(kPackSlidingLayersKey, GgufValue::U32Array(flags));
    w.AddF32(kPackRopeThetaSlidingKey, c.rope_theta_sliding);
  }
  if (options.layout == PackLayout::kBundles && options.tile_bundles) w.AddU32(kPackTiledKey, 1);
  // Column packs keep their statics row-major: a sparse streamed run then gives the resident
  // GGUF's sparse run's logits bit for bit (the GGUF's sparse sessions are not tiled either).
  const bool tile_static = options.layout == PackLayout::kBundles && options.tile_bundles;
  if (tile_static) w.AddU32(kPackTiledStaticKey, 1);
  w.AddString(kPackLayoutKey, options.layout == PackLayout::kColumns         ? kPackLayoutColumns
                             : options.layout == PackLayout::kSparseColumns ? kPackLayoutSparseColumns
                                                                            : kPackLayout);
  if (options.layout == PackLayout::kSparseColumns) {
    w.AddString(kPackSparseTypeKey, DTypeName(groups.empty() ? main_type : groups[0]->group.dtype));
    for (const auto& s : groups) {
      if (s->group.dtype != groups[0]->group.dtype) {
        return Status::InvalidArgument(path + ": a sparse column pack needs one MLP weight type; "
                                              "pass --type");
      }
    }
  }
  w.AddU32(kPackGroupSizeKey, static_cast<uint32_t>(options.group_size));
  w.Add(kPackGroupFirstKey, GgufValue::U32Array(firsts));
  w.Add(kPackGroupCountKey, GgufValue::U32Array(counts));
  for (const auto& s : groups) {
    const PackGroup& g = s->group;
    if (!g.in_order.empty()) {
      w.Add(kPackInOrderPrefix + std::to_string(g.index), GgufValue::I32Array(g.in_order));
    }
    if (!g.down_order.empty()) {
      w.Add(kPackDownOrderPrefix + std::to_string(g.index), GgufValue::I32Array(g.down_order));
    }
  }
  w.AddString(kPackDownTKey, options.layout == PackLayout::kBundles ? "none"
                             : requantized                         ? "requantized"
                                                                   : "exact");
  w.AddString(kPackSourceKey, BaseName(model.path));

  const int head_dim = c.head_dim;
  const int rope_dim = c.rope_dim > 0 ? c.rope_dim : c.head_dim;
  for (const StaticPlan& p : statics) {
    if (tile_static && TiledStatic(p.name, p.out, p.src.shape)) {
      // Converted whole (the rows a range asks for are spread over its 16-row groups), tiled,
      // then handed out range by range; the buffer goes with the last range.
      auto tiled = std::make_shared<std::vector<uint8_t>>();
      w.AddTensor(p.name, p.out, p.src.shape,
                  [p, head_dim = c.head_dim, rope_dim = c.rope_dim > 0 ? c.rope_dim : c.head_dim,
                   tiled](int64_t begin, int64_t end, uint8_t* dst) -> Status {
                    const size_t out_row = RowBytes(p.out, p.src.cols());
                    if (tiled->empty()) {
                      std::vector<uint8_t> rows(out_row * static_cast<size_t>(p.src.rows()));
                      std::vector<float> tmp;
                      for (int64_t r = 0; r < p.src.rows(); ++r) {
                        const int64_t s = p.permute ? AdjacentPairSourceRow(r, head_dim, rope_dim) : r;
                        ConvertRow(p.src, s, p.out, rows.data() + static_cast<size_t>(r) * out_row, &tmp);
                      }
                      tiled->resize(rows.size());
                      kernels::TileRows(TensorView{p.out, p.src.shape, rows.data()}, tiled->data());
                    }
                    std::memcpy(dst, tiled->data() + static_cast<size_t>(begin) * out_row,
                                static_cast<size_t>(end - begin) * out_row);
                    if (end == p.src.rows()) *tiled = {};
                    return Status::Ok();
                  });
      continue;
    }
    if (p.out == p.src.dtype && !p.permute) {
      w.AddTensor(p.name, p.out, p.src.shape, p.src.data);
      continue;
    }
    w.AddTensor(p.name, p.out, p.src.shape,
                [p, head_dim, rope_dim](int64_t begin, int64_t end, uint8_t* dst) -> Status {
                  const size_t out_row = RowBytes(p.out, p.src.cols());
                  std::vector<float> tmp;
                  for (int64_t r = begin; r < end; ++r) {
                    const int64_t s = p.permute ? AdjacentPairSourceRow(r, head_dim, rope_dim) : r;
                    ConvertRow(p.src, s, p.out, dst + static_cast<size_t>(r - begin) * out_row,
                               &tmp);
                  }
                  return Status::Ok();
                });
  }
  for (const auto& s : groups) {
    const PackGroup& g = s->group;
    if (g.layout == PackLayout::kSparseColumns) {
      auto down = s->sparse_down, in = s->sparse_in;
      w.AddByteTensor(PackDownTensorName(g.index), static_cast<int64_t>(down->pages),
                      kSparseTensorRowBytes,
                      [down](int64_t b, int64_t e, uint8_t* dst) { return down->Fill(b, e, dst); });
      w.AddByteTensor(PackInputTensorName(g.index), static_cast<int64_t>(in->pages),
                      kSparseTensorRowBytes,
                      [in](int64_t b, int64_t e, uint8_t* dst) { return in->Fill(b, e, dst); });
      continue;
    }
    if (g.layout == PackLayout::kColumns) {
      w.AddTensor(PackDownTensorName(g.index), g.dtype, Shape{g.down_rows(), g.d_model},
                  [s](int64_t begin, int64_t end, uint8_t* dst) {
                    return FillDown(s.get(), begin, end, dst);
                  });
      w.AddTensor(PackInputTensorName(g.index), g.dtype, Shape{g.in_rows(), g.d_ff},
                  [s](int64_t begin, int64_t end, uint8_t* dst) {
                    return FillInput(s.get(), begin, end, dst);
                  });
      continue;
    }
    w.AddTensor(PackBundleTensorName(g.index), g.dtype, Shape{g.rows(), g.d_model},
                [s](int64_t begin, int64_t end, uint8_t* dst) {
                  return FillBundles(s.get(), begin, end, dst);
                });
  }
  return w.Write(path, progress);
}

}  // namespace weir::format
