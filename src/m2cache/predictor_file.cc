#include "m2cache/predictor_file.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tensor/quantize.h"

namespace weir::m2cache {
namespace {

constexpr char kMagic[8] = {'W', 'E', 'I', 'R', 'M', '2', 'P', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr uint32_t kMaxLayers = 65536;
constexpr uint32_t kMaxDim = 1u << 24;

uint64_t Fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->insert(out->end(), b, b + sizeof(T));
}

void PutBytes(std::vector<uint8_t>* out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool F16AllFinite(const uint8_t* p, size_t values) {
  for (size_t i = 0; i < values; ++i) {
    if ((Get<uint16_t>(p + 2 * i) & 0x7c00u) == 0x7c00u) return false;
  }
  return true;
}

}  // namespace

std::vector<uint8_t> SerializePredictorFile(const PredictorFile& file) {
  std::vector<uint8_t> out;
  PutBytes(&out, kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, kVersion);
  Put<uint32_t>(&out, static_cast<uint32_t>(file.layers.size()));
  Put<float>(&out, file.top_fraction);
  Put<uint32_t>(&out, static_cast<uint32_t>(file.form));
  Put<uint64_t>(&out, 0);  // the checksum, filled in below
  for (const TrainedLayer& l : file.layers) {
    const TensorView& a = l.factors.a();
    const TensorView& u = l.factors.u();
    Put<uint32_t>(&out, static_cast<uint32_t>(a.cols()));
    Put<uint32_t>(&out, static_cast<uint32_t>(u.rows()));
    Put<uint32_t>(&out, static_cast<uint32_t>(a.rows()));
    Put<uint32_t>(&out, 0);
    PutBytes(&out, a.data, a.nbytes());
    PutBytes(&out, u.data, u.nbytes());
    PutBytes(&out, l.bias.data(), l.bias.size() * sizeof(float));
  }
  const uint64_t sum = Fnv1a64(out.data() + kHeaderBytes, out.size() - kHeaderBytes);
  std::memcpy(out.data() + 24, &sum, sizeof(sum));
  return out;
}

Result<PredictorFile> ParsePredictorFile(std::span<const uint8_t> bytes, const std::string& name) {
  auto corrupt = [&](const std::string& why) { return Status::Corrupt(name + ": " + why); };
  if (bytes.size() < kHeaderBytes) {
    return corrupt("is " + std::to_string(bytes.size()) + " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                   "-byte header of a predictor file");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
    return corrupt("not a trained predictor file (magic is not WEIRM2P; write one with `weir m2fit`)");
  }
  const uint32_t version = Get<uint32_t>(p + 8), n_layers = Get<uint32_t>(p + 12), form = Get<uint32_t>(p + 20);
  const float top = Get<float>(p + 16);
  if (version != kVersion) {
    return corrupt("version " + std::to_string(version) + ", this build reads version " + std::to_string(kVersion));
  }
  if (n_layers < 1 || n_layers > kMaxLayers) return corrupt("n_layers " + std::to_string(n_layers) + " is not 1 to 65536");
  if (!(top > 0 && top < 1)) return corrupt("top_fraction " + std::to_string(top) + " is not in (0, 1)");
  if (form > 1) return corrupt("form " + std::to_string(form) + " is neither 0 (logit) nor 1 (gated)");
  const uint64_t want = Get<uint64_t>(p + 24);
  const uint64_t got = Fnv1a64(p + kHeaderBytes, bytes.size() - kHeaderBytes);
  PredictorFile out;
  out.top_fraction = top;
  out.form = static_cast<PredictorForm>(form);
  size_t pos = kHeaderBytes;
  for (uint32_t l = 0; l < n_layers; ++l) {
    const std::string at = "layer " + std::to_string(l) + " (offset " + std::to_string(pos) + ")";
    if (bytes.size() - pos < 16) {
      return corrupt(at + ": the file ends inside the layer's header (truncated: " + std::to_string(bytes.size()) +
                     " bytes)");
    }
    const uint32_t d_model = Get<uint32_t>(p + pos), d_ff = Get<uint32_t>(p + pos + 4), rank = Get<uint32_t>(p + pos + 8);
    const uint32_t zero = Get<uint32_t>(p + pos + 12);
    pos += 16;
    if (d_model < 1 || d_model > kMaxDim || d_ff < 1 || d_ff > kMaxDim || rank < 1 || rank > d_model || rank > d_ff) {
      return corrupt(at + ": d_model " + std::to_string(d_model) + ", d_ff " + std::to_string(d_ff) + ", rank " +
                     std::to_string(rank) + " (each 1 to 2^24, rank at most both)");
    }
    if (zero != 0) return corrupt(at + ": reserved field is " + std::to_string(zero) + ", not 0");
    // Each product is below 2^49: no overflow in 64 bits.
    const uint64_t a_bytes = 2ull * rank * d_model, u_bytes = 2ull * d_ff * rank, b_bytes = 4ull * d_ff;
    const uint64_t need = a_bytes + u_bytes + b_bytes;
    if (need > bytes.size() - pos) {
      return corrupt(at + ": needs " + std::to_string(need) + " bytes of factors, " +
                     std::to_string(bytes.size() - pos) + " are left (truncated?)");
    }
    const uint8_t* a = p + pos;
    const uint8_t* u = a + a_bytes;
    const uint8_t* b = u + u_bytes;
    if (!F16AllFinite(a, a_bytes / 2) || !F16AllFinite(u, u_bytes / 2)) return corrupt(at + ": a factor value is not finite");
    TrainedLayer layer;
    layer.bias.resize(d_ff);
    std::memcpy(layer.bias.data(), b, b_bytes);
    for (float v : layer.bias) {
      if (!std::isfinite(v)) return corrupt(at + ": a bias or scale value is not finite");
    }
    WEIR_ASSIGN_OR_RETURN(layer.factors, LowRankPredictor::FromFactors(rank, d_model, d_ff, {a, a_bytes}, {u, u_bytes}));
    out.layers.push_back(std::move(layer));
    pos += need;
  }
  if (pos != bytes.size()) {
    return corrupt(std::to_string(bytes.size() - pos) + " bytes after the last layer (at offset " + std::to_string(pos) +
                   ")");
  }
  if (got != want) return corrupt("checksum mismatch (the file is damaged)");
  return out;
}

Status WritePredictorFile(const std::string& path, const PredictorFile& file) {
  const std::vector<uint8_t> bytes = SerializePredictorFile(file);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IoError("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<PredictorFile> ReadPredictorFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    bytes.insert(bytes.end(), buf, buf + got);
    if (bytes.size() > (uint64_t{1} << 34)) {
      std::fclose(f);
      return Status::InvalidArgument(path + ": larger than 16 GiB, not a predictor file");
    }
  }
  const bool error = std::ferror(f) != 0;
  std::fclose(f);
  if (error) return Status::IoError("cannot read " + path);
  return ParsePredictorFile(bytes, path);
}

}  // namespace weir::m2cache
