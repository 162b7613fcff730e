// ParseSparsity: `--sparsity NAME[:DENSITY][,key=value...]` -> a RulePolicy.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "sparsity/density.h"
#include "sparsity/rule_policy.h"

namespace weir::sparsity {
namespace {

constexpr const char* kNames = "dense, glu, gate, up, cats, teal, topk-all, dip, dip-ca";

Status Err(const std::string& spec, const std::string& what) {
  return Status::InvalidArgument("--sparsity '" + spec + "': " + what);
}

// A whole-string decimal number (no inf/nan, no trailing characters).
bool ParseNumber(const std::string& text, double* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto r = std::from_chars(text.data(), end, *out);
  return r.ec == std::errc() && r.ptr == end && std::isfinite(*out);
}

std::string Fmt(double v) { return StrFormat("%.6g", v); }

SiteRule TopK(double keep, bool cache_aware = false) {
  SiteRule r;
  r.kind = keep >= 1.0 ? RuleKind::kAll : RuleKind::kTopK;
  r.keep = keep;
  r.cache_aware = cache_aware && r.kind == RuleKind::kTopK;
  return r;
}

// Per-layer thresholds on `stat` for keeping a fraction `keep` (all when keep >= 1).
Result<SiteRule> Threshold(const std::string& spec, const Calibration& calib, CalibStat stat,
                           double keep) {
  SiteRule r;
  r.keep = keep;
  if (keep >= 1.0) return r;  // kAll: a threshold at the smallest sample would still drop values
  r.kind = RuleKind::kThreshold;
  for (int l = 0; l < calib.n_layer(); ++l) {
    auto t = calib.Threshold(l, stat, keep);
    if (!t.ok()) return Err(spec, t.status().message());
    r.thresholds.push_back(*t);
    r.widths.push_back(calib.samples(l, stat).width);
  }
  if (r.thresholds.empty()) return Err(spec, "the calibration has no layers");
  return r;
}

}  // namespace

Result<std::unique_ptr<SparsityPolicy>> ParseSparsity(const std::string& spec,
                                                      const Calibration* calib) {
  if (spec.empty()) {
    return Status::InvalidArgument(std::string("empty --sparsity; expected NAME:DENSITY such as "
                                               "dip:0.5 (methods: ") +
                                   kNames + ")");
  }
  // Split "NAME[:DENSITY]" from ",key=value" options.
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t comma = spec.find(',', start);
    parts.push_back(spec.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::string name = parts[0], density_text;
  bool has_density = false;
  if (size_t colon = name.find(':'); colon != std::string::npos) {
    density_text = name.substr(colon + 1);
    name = name.substr(0, colon);
    has_density = true;
  }
  const std::set<std::string> known = {"dense", "glu",      "gate", "up",    "cats",
                                       "teal",  "topk-all", "dip",  "dip-ca"};
  if (!known.count(name)) {
    return Err(spec, "unknown method '" + name + "'; known methods: " + kNames);
  }
  double density = 1.0;
  if (has_density) {
    if (!ParseNumber(density_text, &density)) {
      return Err(spec, "density '" + density_text + "' is not a number");
    }
    if (!(density > 0.0 && density <= 1.0)) {
      return Err(spec, "density " + density_text + " is outside (0, 1]");
    }
  } else if (name != "dense") {
    return Err(spec, "'" + name + "' needs a density: " + name + ":DENSITY with DENSITY in (0, 1]");
  }
  if (name == "dense" && density != 1.0) {
    return Err(spec, "dense keeps everything; its density can only be 1");
  }

  // Options.
  std::map<std::string, std::string> allowed_help = {{"dip", "up, down, span"},
                                                     {"dip-ca", "up, down, gamma, span"}};
  std::map<std::string, double> opts;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& kv = parts[i];
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Err(spec, "option '" + kv + "' is not key=value");
    }
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    const bool ok_key =
        (name == "dip" && (key == "up" || key == "down" || key == "span")) ||
        (name == "dip-ca" && (key == "up" || key == "down" || key == "gamma" || key == "span"));
    if (!ok_key) {
      auto help = allowed_help.find(name);
      return Err(spec, "unknown option '" + key + "' for " + name + "; " +
                           (help == allowed_help.end() ? name + " takes no options"
                                                       : name + " takes: " + help->second));
    }
    if (opts.count(key)) return Err(spec, "option '" + key + "' given twice");
    double v;
    if (!ParseNumber(value, &v)) return Err(spec, key + "='" + value + "' is not a number");
    if (key == "span") {
      if (!(v >= 1.0 && v <= 1024.0) || v != static_cast<double>(static_cast<int>(v))) {
        return Err(spec, "span=" + value + " is not a whole number of layers from 1 to 1024");
      }
    } else if (key == "gamma" ? !(v >= 0.0 && v <= 1.0) : !(v > 0.0 && v <= 1.0)) {
      return Err(spec, key + "=" + value + " is outside " + (key == "gamma" ? "[0, 1]" : "(0, 1]"));
    }
    opts[key] = v;
  }

  PolicyConfig c;
  PolicyInfo& info = c.info;
  info.name = name;
  info.density = density;
  info.spec = name == "dense" ? "dense" : name + ":" + Fmt(density);
  info.target_mlp_density = density;

  if (name == "dense") {
    // every rule stays kAll
  } else if (name == "glu") {
    // Oracle GLU pruning: up and gate dense, top-k of |h| picks the W_down columns. DENSITY is
    // the fraction of units kept, as the DIP paper counts its oracle; the weights actually read
    // are 2/3 + DENSITY/3 of the MLP.
    info.down_keep = density;
    info.target_mlp_density = (2.0 + density) / 3.0;
    c.down = TopK(density);
  } else if (name == "gate" || name == "up" || name == "cats") {
    // One projection is computed densely (1/3 of the MLP); the kept fraction u of units costs u
    // of each of the other two: density = (1 + 2u) / 3.
    if (density <= 1.0 / 3.0) {
      return Err(spec, "MLP density " + density_text + " is out of reach: " + name +
                           " computes the whole " + (name == "up" ? "up" : "gate") +
                           " projection, 1/3 of the MLP weights, so the density must be > 1/3");
    }
    const double units = std::min(1.0, (3.0 * density - 1.0) / 2.0);
    info.units_keep = units;
    c.predictor = name == "up" ? UnitPredictor::kUp : UnitPredictor::kGate;
    if (name == "cats") {
      if (calib == nullptr) {
        return Err(spec, "cats needs calibration data: pass --calib CALIB (from weir calibrate)");
      }
      WEIR_ASSIGN_OR_RETURN(c.units, Threshold(spec, *calib, CalibStat::kGateSilu, units));
    } else {
      c.units = TopK(units);
    }
    c.down.kind = units >= 1.0 ? RuleKind::kAll : RuleKind::kSameAsUnits;
    info.down_keep = units;
  } else if (name == "teal") {
    if (calib == nullptr) {
      return Err(spec, "teal needs calibration data: pass --calib CALIB (from weir calibrate)");
    }
    WEIR_ASSIGN_OR_RETURN(c.attn_in, Threshold(spec, *calib, CalibStat::kAttnIn, density));
    WEIR_ASSIGN_OR_RETURN(c.attn_out, Threshold(spec, *calib, CalibStat::kAttnOut, density));
    WEIR_ASSIGN_OR_RETURN(c.mlp_in, Threshold(spec, *calib, CalibStat::kMlpIn, density));
    WEIR_ASSIGN_OR_RETURN(c.down, Threshold(spec, *calib, CalibStat::kMlpDown, density));
    info.attn_keep = info.mlp_in_keep = info.down_keep = density;
  } else if (name == "topk-all") {
    c.attn_in = c.attn_out = c.mlp_in = c.down = TopK(density);
    info.attn_keep = info.mlp_in_keep = info.down_keep = density;
  } else {  // dip, dip-ca
    DipAllocation a = DipAllocate(density);
    const bool has_up = opts.count("up"), has_down = opts.count("down");
    if (has_up && has_down) {
      a = {opts["up"], opts["down"]};
    } else if (has_up) {
      a.up_keep = opts["up"];
      a.down_keep = std::clamp(3.0 * density - 2.0 * a.up_keep, 0.0, 1.0);
    } else if (has_down) {
      a.down_keep = opts["down"];
      a.up_keep = std::clamp((3.0 * density - a.down_keep) / 2.0, 0.0, 1.0);
    }
    const bool ca = name == "dip-ca";
    info.cache_aware = ca;
    info.gamma = ca ? static_cast<float>(opts.count("gamma") ? opts["gamma"] : 0.2) : 1.0f;
    info.mlp_in_keep = a.up_keep;
    info.down_keep = a.down_keep;
    info.target_mlp_density = DipMlpDensity(a);
    c.mlp_in = TopK(a.up_keep, ca);
    c.down = TopK(a.down_keep, ca);
    if (opts.count("span")) c.mlp_in.span = static_cast<int>(opts["span"]);
    info.mlp_in_span = c.mlp_in.span;
    info.spec += ",up=" + Fmt(a.up_keep) + ",down=" + Fmt(a.down_keep);
    if (ca) info.spec += ",gamma=" + Fmt(info.gamma);
    if (c.mlp_in.span > 1) info.spec += ",span=" + std::to_string(c.mlp_in.span);
  }
  return std::unique_ptr<SparsityPolicy>(new RulePolicy(std::move(c)));
}

}  // namespace weir::sparsity
