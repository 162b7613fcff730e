// Calibration: thresholds as exact sample quantiles, and the JSON file (format in the header).
#include "sparsity/calibration.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sparsity/select.h"

namespace weir::sparsity {
namespace {

using Json = nlohmann::json;
constexpr const char* kFormat = "weir-calibration";
constexpr int64_t kVersion = 1;

Status Bad(const std::string& path, const std::string& where, const std::string& what) {
  return Status::Corrupt(path + ": " + where + ": " + what);
}

// A JSON integer that fits int64 (not a float, not a huge unsigned).
bool AsInt(const Json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return true;
  }
  return false;
}

Result<int64_t> GetInt(const Json& obj, const char* key, const std::string& path,
                       const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return Bad(path, where, StrFormat("missing field '%s'", key));
  int64_t v;
  if (!AsInt(*it, &v)) return Bad(path, where + "." + key, "is not an integer: " + it->dump());
  return v;
}

Status ParseSampleSet(const Json& j, int64_t max_samples, const std::string& path,
                      const std::string& where, SampleSet* set) {
  if (!j.is_object()) return Bad(path, where, "is not an object");
  WEIR_ASSIGN_OR_RETURN(set->width, GetInt(j, "width", path, where));
  WEIR_ASSIGN_OR_RETURN(set->seen, GetInt(j, "seen", path, where));
  if (set->width < 1)
    return Bad(path, where + ".width", StrFormat("%lld < 1", (long long)set->width));
  if (set->seen < 0) return Bad(path, where + ".seen", StrFormat("%lld < 0", (long long)set->seen));
  auto it = j.find("samples");
  if (it == j.end() || !it->is_array()) return Bad(path, where, "missing array 'samples'");
  const int64_t n = static_cast<int64_t>(it->size());
  if (n > max_samples || n > set->seen) {
    return Bad(path, where + ".samples",
               StrFormat("%lld samples but max_samples is %lld and seen is %lld", (long long)n,
                         (long long)max_samples, (long long)set->seen));
  }
  if (n < std::min(max_samples, set->seen)) {
    return Bad(path, where + ".samples",
               StrFormat("%lld samples but a full reservoir of min(max_samples %lld, seen %lld)"
                         " was expected",
                         (long long)n, (long long)max_samples, (long long)set->seen));
  }
  set->sorted.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Json& v = (*it)[static_cast<size_t>(i)];
    const std::string at = StrFormat("%s.samples[%lld]", where.c_str(), (long long)i);
    if (!v.is_number()) return Bad(path, at, "is not a number: " + v.dump());
    const double d = v.get<double>();
    const float f = static_cast<float>(d);
    if (!std::isfinite(f) || f < 0)
      return Bad(path, at, "is not a finite magnitude >= 0: " + v.dump());
    if (i > 0 && f < set->sorted[static_cast<size_t>(i - 1)]) {
      return Bad(path, at, "samples are not in ascending order");
    }
    set->sorted[static_cast<size_t>(i)] = f;
  }
  auto kh = j.find("kept_half");
  if (kh != j.end()) {
    if (!kh->is_array() || static_cast<int64_t>(kh->size()) != set->width) {
      return Bad(path, where + ".kept_half",
                 StrFormat("is not an array of width %lld counts", (long long)set->width));
    }
    set->kept_half.resize(kh->size());
    for (size_t i = 0; i < kh->size(); ++i) {
      const Json& v = (*kh)[i];
      if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(set->seen)) {
        return Bad(path, StrFormat("%s.kept_half[%zu]", where.c_str(), i),
                   "is not a count between 0 and seen: " + v.dump());
      }
      set->kept_half[i] = static_cast<uint32_t>(v.get<uint64_t>());
    }
  }
  return Status::Ok();
}

void AppendFloat(std::string* s, float f) {
  char buf[32];
  // 9 significant digits reproduce every float exactly, also through a double parse.
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::general, 9);
  s->append(buf, r.ptr);
}

}  // namespace

std::string_view CalibStatName(CalibStat stat) {
  switch (stat) {
    case CalibStat::kAttnIn:
      return "attn_in";
    case CalibStat::kAttnOut:
      return "attn_out";
    case CalibStat::kMlpIn:
      return "mlp_in";
    case CalibStat::kMlpDown:
      return "mlp_down";
    case CalibStat::kGateSilu:
      return "gate_silu";
  }
  return "?";
}

Result<float> Calibration::Threshold(int layer, CalibStat stat, double keep) const {
  if (layer < 0 || layer >= n_layer()) {
    return Status::InvalidArgument(
        StrFormat("calibration has %d layers, layer %d was asked for", n_layer(), layer));
  }
  const SampleSet& set = samples(layer, stat);
  if (set.sorted.empty()) {
    return Status::InvalidArgument(StrFormat("calibration has no '%s' samples for layer %d",
                                             std::string(CalibStatName(stat)).c_str(), layer));
  }
  const int64_t n = static_cast<int64_t>(set.sorted.size());
  const int64_t m = KeepCount(keep, n);
  return set.sorted[static_cast<size_t>(n - m)];
}

std::string Calibration::ToJson() const {
  std::string s;
  s += "{\n  \"format\": \"";
  s += kFormat;
  s += StrFormat("\",\n  \"version\": %lld,\n  \"note\": ", (long long)kVersion);
  s += Json(note).dump();
  s += StrFormat(",\n  \"max_samples\": %lld,\n  \"n_layer\": %d,\n  \"layers\": [",
                 (long long)max_samples, n_layer());
  for (int l = 0; l < n_layer(); ++l) {
    s += l == 0 ? "\n    {" : ",\n    {";
    bool first = true;
    for (int k = 0; k < kNumCalibStats; ++k) {
      const SampleSet& set = layers[static_cast<size_t>(l)][static_cast<size_t>(k)];
      if (set.width == 0) continue;
      s += first ? "\n      \"" : ",\n      \"";
      first = false;
      s += CalibStatName(static_cast<CalibStat>(k));
      s += StrFormat("\": {\"width\": %lld, \"seen\": %lld, \"samples\": [", (long long)set.width,
                     (long long)set.seen);
      for (size_t i = 0; i < set.sorted.size(); ++i) {
        if (i) s += ", ";
        AppendFloat(&s, set.sorted[i]);
      }
      s += "]";
      if (!set.kept_half.empty()) {
        s += ", \"kept_half\": [";
        for (size_t i = 0; i < set.kept_half.size(); ++i) {
          if (i) s += ", ";
          s += std::to_string(set.kept_half[i]);
        }
        s += "]";
      }
      s += "}";
    }
    if (static_cast<size_t>(l) < expert_chosen.size() && !expert_chosen[static_cast<size_t>(l)].empty()) {
      s += first ? "\n      \"expert_chosen\": [" : ",\n      \"expert_chosen\": [";
      first = false;
      const std::vector<uint32_t>& counts = expert_chosen[static_cast<size_t>(l)];
      for (size_t i = 0; i < counts.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(counts[i]);
      }
      s += "]";
    }
    s += first ? "}" : "\n    }";
  }
  s += "\n  ]\n}\n";
  return s;
}

Result<Calibration> Calibration::FromJson(std::string_view text, const std::string& path) {
  Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Status::Corrupt(path + ": not valid JSON");
  if (!root.is_object()) return Status::Corrupt(path + ": top level is not a JSON object");
  auto fmt = root.find("format");
  if (fmt == root.end() || !fmt->is_string() || fmt->get<std::string>() != kFormat) {
    return Bad(path, "format",
               StrFormat("expected \"%s\"", kFormat) +
                   (fmt == root.end() ? std::string(", field missing") : ", found " + fmt->dump()));
  }
  WEIR_ASSIGN_OR_RETURN(int64_t version, GetInt(root, "version", path, "top level"));
  if (version != kVersion) {
    return Status::Unsupported(StrFormat("%s: version %lld, this build reads version %lld",
                                         path.c_str(), (long long)version, (long long)kVersion));
  }
  Calibration c;
  auto note = root.find("note");
  if (note != root.end()) {
    if (!note->is_string()) return Bad(path, "note", "is not a string");
    c.note = note->get<std::string>();
  }
  WEIR_ASSIGN_OR_RETURN(c.max_samples, GetInt(root, "max_samples", path, "top level"));
  if (c.max_samples < 1)
    return Bad(path, "max_samples", StrFormat("%lld < 1", (long long)c.max_samples));
  WEIR_ASSIGN_OR_RETURN(int64_t n_layer, GetInt(root, "n_layer", path, "top level"));
  auto layers = root.find("layers");
  if (layers == root.end() || !layers->is_array()) return Bad(path, "layers", "missing array");
  if (n_layer < 0 || static_cast<int64_t>(layers->size()) != n_layer) {
    return Bad(
        path, "layers",
        StrFormat("has %zu entries but n_layer is %lld", layers->size(), (long long)n_layer));
  }
  c.layers.resize(static_cast<size_t>(n_layer));
  c.expert_chosen.resize(static_cast<size_t>(n_layer));
  for (int64_t l = 0; l < n_layer; ++l) {
    const Json& lj = (*layers)[static_cast<size_t>(l)];
    const std::string where = StrFormat("layers[%lld]", (long long)l);
    if (!lj.is_object()) return Bad(path, where, "is not an object");
    for (auto it = lj.begin(); it != lj.end(); ++it) {
      if (it.key() == "expert_chosen") {
        const Json& a = it.value();
        if (!a.is_array() || a.empty() || a.size() > 1024) {
          return Bad(path, where + ".expert_chosen", "is not an array of 1 to 1024 counts");
        }
        std::vector<uint32_t>& counts = c.expert_chosen[static_cast<size_t>(l)];
        for (size_t i = 0; i < a.size(); ++i) {
          if (!a[i].is_number_unsigned() || a[i].get<uint64_t>() > UINT32_MAX) {
            return Bad(path, StrFormat("%s.expert_chosen[%zu]", where.c_str(), i),
                       "is not a count: " + a[i].dump());
          }
          counts.push_back(static_cast<uint32_t>(a[i].get<uint64_t>()));
        }
        continue;
      }
      int k = 0;
      while (k < kNumCalibStats && CalibStatName(static_cast<CalibStat>(k)) != it.key()) ++k;
      if (k == kNumCalibStats) return Bad(path, where, "unknown statistic '" + it.key() + "'");
      WEIR_RETURN_IF_ERROR(
          ParseSampleSet(it.value(), c.max_samples, path, where + "." + it.key(),
                         &c.layers[static_cast<size_t>(l)][static_cast<size_t>(k)]));
    }
  }
  return c;
}

Status Calibration::Save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::IoError(path + ": cannot open for writing");
  const std::string text = ToJson();
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  if (!f) return Status::IoError(path + ": write failed");
  return Status::Ok();
}

Result<Calibration> Calibration::Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(path + ": cannot open calibration file");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::IoError(path + ": read failed");
  return FromJson(ss.str(), path);
}

}  // namespace weir::sparsity
