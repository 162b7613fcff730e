#include "m2cache/store_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"

namespace weir::m2cache {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kHeaderBytes = 8 + 4 + 8;
constexpr uint64_t kMaxJsonBytes = uint64_t{64} << 20;
constexpr int64_t kMaxLayers = 1 << 16;
constexpr int64_t kMaxDim = int64_t{1} << 22;
constexpr uint64_t kMaxPredictorBytes = uint64_t{4} << 30;  // all factors together
constexpr uint64_t kMatrixAlignment = 64;
const char* const kPrecisionKey[kNumPrecisions] = {"high", "low"};
const char* const kMatrixKey[3] = {"gate", "up", "down_t"};
const char* const kFormatName = "weir-m2cache-store";

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

const char* PredictorName(PredictorKind k) {
  return k == PredictorKind::kLowRankGlu ? "glu" : k == PredictorKind::kLowRank ? "lowrank" : "none";
}

// ---- Writing -----------------------------------------------------------------------------------

struct PredictorLayout {
  int64_t rank = 0;
  StoreRange factor[5];  // gate_a, gate_u, up_a, up_u, up_scale
  const void* data[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  uint64_t bytes[5] = {0, 0, 0, 0, 0};
};
const char* const kFactorKey[5] = {"gate_a", "gate_u", "up_a", "up_u", "up_scale"};

Json RangeJson(const StoreRange& r) { return Json{{"offset", r.offset}, {"bytes", r.bytes}}; }

// The index of `w` with the data starting at `data_start`; fills layers and predictors.
Json LayoutIndex(const M2Weights& w, const StorePlan& plan, uint64_t data_start, std::vector<StoreLayer>* layers,
                 std::vector<PredictorLayout>* predictors, uint64_t* file_bytes) {
  const NeuronStore& store = *w.store;
  const PredictorKind kind = w.predictors.empty() ? PredictorKind::kOracle
                             : w.up_predictors.empty() ? PredictorKind::kLowRank
                                                       : PredictorKind::kLowRankGlu;
  layers->clear();
  predictors->clear();
  uint64_t pos = data_start;
  Json jl = Json::array();
  for (int l = 0; l < store.n_layers(); ++l) {
    const LayerNeurons& ln = store.layer(l);
    StoreLayer sl;
    sl.d_model = ln.d_model;
    sl.d_ff = ln.d_ff;
    sl.extent.offset = pos;
    uint64_t at = pos;
    Json entry = {{"d_model", ln.d_model}, {"d_ff", ln.d_ff}};
    for (int p = 0; p < kNumPrecisions; ++p) {
      const TensorView* m[3] = {&ln.at[p].gate, &ln.at[p].up, &ln.at[p].down_t};
      Json jp = Json::object();
      for (int k = 0; k < 3; ++k) {
        at = AlignUp(at, kMatrixAlignment);
        sl.matrix[p][k] = {at, m[k]->nbytes()};
        jp[kMatrixKey[k]] = RangeJson(sl.matrix[p][k]);
        at += m[k]->nbytes();
      }
      entry[kPrecisionKey[p]] = jp;
    }
    sl.extent.bytes = AlignUp(at - pos, kStoreExtentAlignment);
    entry["offset"] = sl.extent.offset;
    entry["bytes"] = sl.extent.bytes;
    pos += sl.extent.bytes;
    layers->push_back(sl);
    jl.push_back(std::move(entry));
  }
  if (kind != PredictorKind::kOracle) {
    for (int l = 0; l < store.n_layers(); ++l) {
      PredictorLayout pl;
      pl.rank = w.predictors[static_cast<size_t>(l)].rank();
      auto set = [&](int k, const TensorView& v) {
        pl.data[k] = v.data;
        pl.bytes[k] = v.nbytes();
      };
      set(0, w.predictors[static_cast<size_t>(l)].a());
      set(1, w.predictors[static_cast<size_t>(l)].u());
      if (kind == PredictorKind::kLowRankGlu) {
        set(2, w.up_predictors[static_cast<size_t>(l)].a());
        set(3, w.up_predictors[static_cast<size_t>(l)].u());
      }
      if (static_cast<size_t>(l) < w.up_scale.size() && !w.up_scale[static_cast<size_t>(l)].empty()) {
        pl.data[4] = w.up_scale[static_cast<size_t>(l)].data();
        pl.bytes[4] = w.up_scale[static_cast<size_t>(l)].size() * sizeof(float);
      }
      Json jp = {{"rank", pl.rank}};
      for (int k = 0; k < 5; ++k) {
        if (pl.data[k] == nullptr) continue;
        pos = AlignUp(pos, kStoreExtentAlignment);
        pl.factor[k] = {pos, pl.bytes[k]};
        jp[kFactorKey[k]] = RangeJson(pl.factor[k]);
        pos += pl.bytes[k];
      }
      jl[static_cast<size_t>(l)]["predictor"] = jp;
      predictors->push_back(pl);
    }
  }
  *file_bytes = pos;
  Json index = Json{{"format", kFormatName},
              {"n_layers", store.n_layers()},
              {"high", DTypeName(store.type(kHigh))},
              {"low", DTypeName(store.type(kLow))},
              {"predictor", {{"kind", PredictorName(kind)}, {"rank", kind == PredictorKind::kOracle ? 0 : w.rank}}},
              {"layers", std::move(jl)}};
  if (plan.valid()) index["plan"] = {{"r_high", plan.r_high}, {"r_low", plan.r_low}};
  return index;
}

// Sequential writer over a file descriptor that pads with zeros up to a given offset.
class Writer {
 public:
  Writer(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status Write(const void* data, size_t bytes) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::IoError(path_ + ": write failed: " + std::strerror(errno));
      }
      p += n;
      bytes -= static_cast<size_t>(n);
      pos_ += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }
  Status PadTo(uint64_t offset) {
    static const uint8_t zeros[4096] = {};
    while (pos_ < offset) WEIR_RETURN_IF_ERROR(Write(zeros, static_cast<size_t>(std::min<uint64_t>(offset - pos_, 4096))));
    return Status::Ok();
  }
  uint64_t pos() const { return pos_; }

 private:
  int fd_;
  std::string path_;
  uint64_t pos_ = 0;
};

Status WriteAll(const M2Weights& w, const StorePlan& plan, int fd, const std::string& tmp,
                const std::function<void(int)>& progress) {
  std::vector<StoreLayer> layers;
  std::vector<PredictorLayout> predictors;
  uint64_t file_bytes = 0;
  // The offsets are absolute, so the index's length decides where the data starts: grow the
  // reserved header until the index fits in it.
  uint64_t data_start = kStoreExtentAlignment;
  std::string json;
  for (;;) {
    json = LayoutIndex(w, plan, data_start, &layers, &predictors, &file_bytes).dump();
    if (kHeaderBytes + json.size() <= data_start) break;
    data_start = AlignUp(kHeaderBytes + json.size(), kStoreExtentAlignment);
  }
  Writer out(fd, tmp);
  uint8_t header[kHeaderBytes];
  std::memcpy(header, kStoreMagic, 8);
  const uint32_t version = kStoreVersion;
  const uint64_t json_bytes = json.size();
  std::memcpy(header + 8, &version, 4);  // little-endian hosts only (weir's targets)
  std::memcpy(header + 12, &json_bytes, 8);
  WEIR_RETURN_IF_ERROR(out.Write(header, sizeof(header)));
  WEIR_RETURN_IF_ERROR(out.Write(json.data(), json.size()));
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerNeurons& ln = w.store->layer(static_cast<int>(l));
    for (int p = 0; p < kNumPrecisions; ++p) {
      const TensorView* m[3] = {&ln.at[p].gate, &ln.at[p].up, &ln.at[p].down_t};
      for (int k = 0; k < 3; ++k) {
        WEIR_RETURN_IF_ERROR(out.PadTo(layers[l].matrix[p][k].offset));
        WEIR_RETURN_IF_ERROR(out.Write(m[k]->data, m[k]->nbytes()));
      }
    }
    WEIR_RETURN_IF_ERROR(out.PadTo(layers[l].extent.offset + layers[l].extent.bytes));
    if (progress) progress(static_cast<int>(l));
  }
  for (const PredictorLayout& pl : predictors) {
    for (int k = 0; k < 5; ++k) {
      if (pl.data[k] == nullptr) continue;
      WEIR_RETURN_IF_ERROR(out.PadTo(pl.factor[k].offset));
      WEIR_RETURN_IF_ERROR(out.Write(pl.data[k], pl.bytes[k]));
    }
  }
  if (out.pos() != file_bytes) {
    return Status::Internal(tmp + ": wrote " + std::to_string(out.pos()) + " bytes, the layout says " +
                            std::to_string(file_bytes));
  }
  if (::fsync(fd) != 0) return Status::IoError(tmp + ": fsync failed: " + std::strerror(errno));
  return Status::Ok();
}

// ---- Reading -----------------------------------------------------------------------------------

// Typed getters that never throw: a missing field or a wrong type is a Corrupt status.
Result<int64_t> GetInt(const Json& obj, const char* key, int64_t lo, int64_t hi, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !(it->is_number_integer() || it->is_number_unsigned())) {
    return Status::Corrupt(where + ": field \"" + key + "\" is missing or not an integer");
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Status::Corrupt(where + ": field \"" + key + "\" is out of range");
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return Status::Corrupt(where + ": " + key + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "]");
  }
  return v;
}

Result<std::string> GetString(const Json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    return Status::Corrupt(where + ": field \"" + key + "\" is missing or not a string");
  }
  return it->get<std::string>();
}

Result<const Json*> GetObject(const Json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) {
    return Status::Corrupt(where + ": field \"" + key + "\" is missing or not an object");
  }
  return &*it;
}

// A range inside [lo, hi) of `bytes` exactly (overflow-safe).
Result<StoreRange> GetRange(const Json& obj, const char* key, uint64_t lo, uint64_t hi, uint64_t bytes,
                            const std::string& where) {
  WEIR_ASSIGN_OR_RETURN(const Json* r, GetObject(obj, key, where));
  const std::string at = where + "." + key;
  WEIR_ASSIGN_OR_RETURN(int64_t offset, GetInt(*r, "offset", 0, INT64_MAX, at));
  WEIR_ASSIGN_OR_RETURN(int64_t length, GetInt(*r, "bytes", 0, INT64_MAX, at));
  const uint64_t o = static_cast<uint64_t>(offset), n = static_cast<uint64_t>(length);
  if (n != bytes) {
    return Status::Corrupt(at + ": " + std::to_string(n) + " bytes, but its shape and type need " +
                           std::to_string(bytes));
  }
  if (o < lo || o > hi || n > hi - o) {
    return Status::Corrupt(at + ": bytes [" + std::to_string(o) + ", +" + std::to_string(n) + ") lie outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + ")");
  }
  return StoreRange{o, n};
}

Result<DType> GetType(const Json& obj, const char* key, const std::string& where) {
  WEIR_ASSIGN_OR_RETURN(std::string name, GetString(obj, key, where));
  const std::optional<DType> t = DTypeFromName(name);
  if (!t) return Status::Corrupt(where + ": " + key + " type \"" + name + "\" is not one weir knows");
  return *t;
}

}  // namespace

uint64_t StoreIndex::extent_bytes() const {
  uint64_t b = 0;
  for (const StoreLayer& l : layers) b += l.extent.bytes;
  return b;
}

uint64_t StoreIndex::max_extent_bytes() const {
  uint64_t b = 0;
  for (const StoreLayer& l : layers) b = std::max(b, l.extent.bytes);
  return b;
}

Status WriteStoreFile(const M2Weights& w, const std::string& path, const std::function<void(int)>& progress,
                      const StorePlan& plan) {
  if (plan.valid() && !(plan.r_high <= 1 && plan.r_low >= 0 && plan.r_high + plan.r_low <= 1 + 1e-9)) {
    return Status::InvalidArgument(path + ": a plan's ratios must be fractions with r_high + r_low <= 1");
  }
  if (w.store == nullptr) return Status::InvalidArgument(path + ": the M2Cache weights hold no neuron store to write");
  if (!w.bias.empty()) {
    return Status::Unsupported(path + ": a store file does not hold a trained predictor (write the store with the "
                               "lowrank predictor; runs of it cannot use predictor=trained yet)");
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(tmp + ": cannot create: " + std::strerror(errno));
  Status st = WriteAll(w, plan, fd, tmp, progress);
  if (::close(fd) != 0 && st.ok()) st = Status::IoError(tmp + ": close failed: " + std::strerror(errno));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Status::IoError(tmp + ": cannot rename to " + path + ": " + std::strerror(errno));
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Status ReadRange(storage::BlockDevice* device, uint64_t offset, size_t length, void* dst) {
  const size_t a = std::max<size_t>(device->required_alignment(), 1);
  if (a == 1 || (offset % a == 0 && reinterpret_cast<uintptr_t>(dst) % a == 0 &&
                 (length % a == 0 || offset + length == device->size()))) {
    return device->ReadAt(offset, length, dst);
  }
  if (offset > device->size() || length > device->size() - offset) {
    return device->ReadAt(offset, length, dst);  // the device names the bad range
  }
  const uint64_t begin = offset / a * a;
  const uint64_t end = std::min<uint64_t>(AlignUp(offset + length, a), device->size());
  AlignedBuffer bounce;
  if (!bounce.Reset(static_cast<size_t>(end - begin), std::max<size_t>(a, 64))) {
    return Status::OutOfMemory(device->name() + ": cannot allocate a read buffer");
  }
  WEIR_RETURN_IF_ERROR(device->ReadAt(begin, static_cast<size_t>(end - begin), bounce.data()));
  std::memcpy(dst, bounce.data<uint8_t>() + (offset - begin), length);
  return Status::Ok();
}

Result<OpenedStore> OpenStoreFile(const std::string& path, storage::BlockDevice* device) {
  const uint64_t size = device->size();
  if (size < kHeaderBytes) {
    return Status::Corrupt(path + ": " + std::to_string(size) + " bytes is too short for a store file header");
  }
  uint8_t header[kHeaderBytes];
  WEIR_RETURN_IF_ERROR(ReadRange(device, 0, sizeof(header), header).WithContext(path));
  if (std::memcmp(header, kStoreMagic, 8) != 0) {
    return Status::Corrupt(path + ": not an M2Cache store file (magic is not WEIRM2S1); write one with `weir m2store`");
  }
  uint32_t version = 0;
  uint64_t json_bytes = 0;
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&json_bytes, header + 12, 8);
  if (version != kStoreVersion) {
    return Status::Unsupported(path + ": store file version " + std::to_string(version) + ", this weir reads version " +
                               std::to_string(kStoreVersion));
  }
  if (json_bytes == 0 || json_bytes > kMaxJsonBytes || json_bytes > size - kHeaderBytes) {
    return Status::Corrupt(path + ": the index claims " + std::to_string(json_bytes) + " bytes; the file has " +
                           std::to_string(size) + " (limit " + std::to_string(kMaxJsonBytes) + ")");
  }
  std::string text(static_cast<size_t>(json_bytes), '\0');
  WEIR_RETURN_IF_ERROR(ReadRange(device, kHeaderBytes, text.size(), text.data()).WithContext(path));
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corrupt(path + ": the index is not a JSON object");
  const std::string where = path + " index";
  WEIR_ASSIGN_OR_RETURN(std::string format, GetString(j, "format", where));
  if (format != kFormatName) return Status::Corrupt(where + ": format \"" + format + "\", expected " + kFormatName);

  OpenedStore out;
  StoreIndex& index = out.index;
  index.path = path;
  index.file_bytes = size;
  WEIR_ASSIGN_OR_RETURN(index.types.high, GetType(j, "high", where));
  WEIR_ASSIGN_OR_RETURN(index.types.low, GetType(j, "low", where));
  WEIR_ASSIGN_OR_RETURN(int64_t n_layers, GetInt(j, "n_layers", 1, kMaxLayers, where));
  WEIR_ASSIGN_OR_RETURN(const Json* pred, GetObject(j, "predictor", where));
  WEIR_ASSIGN_OR_RETURN(std::string kind, GetString(*pred, "kind", where + ".predictor"));
  if (kind == "lowrank") {
    out.predictor = PredictorKind::kLowRank;
  } else if (kind == "glu") {
    out.predictor = PredictorKind::kLowRankGlu;
  } else if (kind == "none") {
    out.predictor = PredictorKind::kOracle;
  } else {
    return Status::Corrupt(where + ": predictor kind \"" + kind + "\" (lowrank, glu or none)");
  }
  const bool has_predictor = out.predictor != PredictorKind::kOracle;
  if (j.contains("plan")) {
    WEIR_ASSIGN_OR_RETURN(const Json* jplan, GetObject(j, "plan", where));
    const auto h = jplan->find("r_high"), l = jplan->find("r_low");
    if (h == jplan->end() || l == jplan->end() || !h->is_number() || !l->is_number()) {
      return Status::Corrupt(where + ".plan: r_high and r_low must be numbers");
    }
    const double rh = h->get<double>(), rl = l->get<double>();
    if (!(rh >= 0 && rl >= 0 && rh + rl <= 1 + 1e-9)) {
      return Status::Corrupt(where + ".plan: r_high and r_low must be fractions with r_high + r_low <= 1");
    }
    out.plan = {rh, rl};
  }
  WEIR_ASSIGN_OR_RETURN(int64_t rank, GetInt(*pred, "rank", has_predictor ? 1 : 0, has_predictor ? kMaxDim : 0,
                                             where + ".predictor"));
  const auto layers_it = j.find("layers");
  if (layers_it == j.end() || !layers_it->is_array() || static_cast<int64_t>(layers_it->size()) != n_layers) {
    return Status::Corrupt(where + ": \"layers\" is not an array of n_layers = " + std::to_string(n_layers) + " entries");
  }
  const uint64_t data_start = kHeaderBytes + json_bytes;
  const DType type_of[kNumPrecisions] = {index.types.high, index.types.low};
  auto weights = std::make_unique<M2Weights>();
  weights->rank = has_predictor ? static_cast<int>(rank) : 0;
  uint64_t predictor_bytes = 0;
  std::vector<uint8_t> a, u;
  for (int64_t l = 0; l < n_layers; ++l) {
    const Json& e = (*layers_it)[static_cast<size_t>(l)];
    const std::string at = where + ": layer " + std::to_string(l);
    if (!e.is_object()) return Status::Corrupt(at + " is not an object");
    StoreLayer sl;
    WEIR_ASSIGN_OR_RETURN(sl.d_model, GetInt(e, "d_model", 1, kMaxDim, at));
    WEIR_ASSIGN_OR_RETURN(sl.d_ff, GetInt(e, "d_ff", 1, kMaxDim, at));
    for (DType t : type_of) {
      if (sl.d_model % BlockSize(t) != 0) {
        return Status::Corrupt(at + ": d_model " + std::to_string(sl.d_model) + " is not a multiple of " + DTypeName(t) +
                               "'s block of " + std::to_string(BlockSize(t)));
      }
    }
    WEIR_ASSIGN_OR_RETURN(int64_t offset, GetInt(e, "offset", 0, INT64_MAX, at));
    WEIR_ASSIGN_OR_RETURN(int64_t bytes, GetInt(e, "bytes", 1, INT64_MAX, at));
    sl.extent = {static_cast<uint64_t>(offset), static_cast<uint64_t>(bytes)};
    if (sl.extent.offset % kStoreExtentAlignment != 0 || sl.extent.bytes % kStoreExtentAlignment != 0) {
      return Status::Corrupt(at + ": extent at " + std::to_string(offset) + " of " + std::to_string(bytes) +
                             " bytes is not 4096-aligned");
    }
    if (sl.extent.offset < data_start || sl.extent.offset > size || sl.extent.bytes > size - sl.extent.offset) {
      return Status::Corrupt(at + ": extent [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                             ") lies outside the data of the file [" + std::to_string(data_start) + ", " +
                             std::to_string(size) + ")");
    }
    const uint64_t ext_end = sl.extent.offset + sl.extent.bytes;
    for (int p = 0; p < kNumPrecisions; ++p) {
      WEIR_ASSIGN_OR_RETURN(const Json* jp, GetObject(e, kPrecisionKey[p], at));
      // d_model, d_ff <= 2^22: a row is at most 16 MiB and a matrix 2^46 bytes, no overflow.
      const uint64_t matrix = static_cast<uint64_t>(RowBytes(type_of[p], sl.d_model)) * static_cast<uint64_t>(sl.d_ff);
      for (int k = 0; k < 3; ++k) {
        WEIR_ASSIGN_OR_RETURN(sl.matrix[p][k], GetRange(*jp, kMatrixKey[k], sl.extent.offset, ext_end, matrix,
                                                        at + "." + kPrecisionKey[p]));
        if ((sl.matrix[p][k].offset - sl.extent.offset) % kMatrixAlignment != 0) {
          return Status::Corrupt(at + "." + kPrecisionKey[p] + "." + kMatrixKey[k] + ": offset " +
                                 std::to_string(sl.matrix[p][k].offset) + " is not 64-aligned in its extent");
        }
      }
    }
    if (has_predictor) {
      WEIR_ASSIGN_OR_RETURN(const Json* jp, GetObject(e, "predictor", at));
      const std::string pat = at + ".predictor";
      WEIR_ASSIGN_OR_RETURN(int64_t r, GetInt(*jp, "rank", 1, std::min({rank, sl.d_model, sl.d_ff}), pat));
      const int factors = out.predictor == PredictorKind::kLowRankGlu ? 2 : 1;
      for (int f = 0; f < factors; ++f) {
        const uint64_t a_bytes = RowBytes(DType::kF16, sl.d_model) * static_cast<uint64_t>(r);
        const uint64_t u_bytes = RowBytes(DType::kF16, r) * static_cast<uint64_t>(sl.d_ff);
        WEIR_ASSIGN_OR_RETURN(StoreRange ra, GetRange(*jp, kFactorKey[2 * f], data_start, size, a_bytes, pat));
        WEIR_ASSIGN_OR_RETURN(StoreRange ru, GetRange(*jp, kFactorKey[2 * f + 1], data_start, size, u_bytes, pat));
        predictor_bytes += a_bytes + u_bytes;
        if (predictor_bytes > kMaxPredictorBytes) {
          return Status::Corrupt(pat + ": the predictors claim more than " + std::to_string(kMaxPredictorBytes) + " bytes");
        }
        a.resize(static_cast<size_t>(a_bytes));
        u.resize(static_cast<size_t>(u_bytes));
        WEIR_RETURN_IF_ERROR(ReadRange(device, ra.offset, a.size(), a.data()).WithContext(pat));
        WEIR_RETURN_IF_ERROR(ReadRange(device, ru.offset, u.size(), u.data()).WithContext(pat));
        WEIR_ASSIGN_OR_RETURN(LowRankPredictor q, LowRankPredictor::FromFactors(r, sl.d_model, sl.d_ff, a, u));
        (f == 0 ? weights->predictors : weights->up_predictors).push_back(std::move(q));
      }
      // Optional: the up projection's expected magnitudes that scale a lowrank score (F32 [d_ff]).
      if (jp->contains("up_scale")) {
        const uint64_t s_bytes = static_cast<uint64_t>(sl.d_ff) * sizeof(float);
        WEIR_ASSIGN_OR_RETURN(StoreRange rs, GetRange(*jp, "up_scale", data_start, size, s_bytes, pat));
        std::vector<float> scale(static_cast<size_t>(sl.d_ff));
        WEIR_RETURN_IF_ERROR(ReadRange(device, rs.offset, s_bytes, scale.data()).WithContext(pat));
        for (float v : scale) {
          if (!std::isfinite(v) || v < 0) return Status::Corrupt(pat + ".up_scale: a value is negative or not finite");
        }
        weights->up_scale.resize(static_cast<size_t>(l) + 1);
        weights->up_scale[static_cast<size_t>(l)] = std::move(scale);
      }
    }
    index.layers.push_back(sl);
  }
  out.weights = std::move(weights);
  return out;
}

}  // namespace weir::m2cache
