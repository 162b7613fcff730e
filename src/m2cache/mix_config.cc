#include "m2cache/mix_config.h"

#include <cstdlib>

namespace weir::m2cache {
namespace {

bool ParseFraction(const std::string& v, double* out) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(d >= 0.0 && d <= 1.0)) return false;
  *out = d;
  return true;
}

bool ParseOnOff(const std::string& v, bool* out) {
  if (v == "on" || v == "1" || v == "true") return *out = true, true;
  if (v == "off" || v == "0" || v == "false") return *out = false, true;
  return false;
}

}  // namespace

Result<MixConfig> ParseMixConfig(const std::string& spec) {
  MixConfig c;
  auto bad = [&](const std::string& part, const std::string& why) {
    return Status::InvalidArgument("--m2cache '" + spec + "': '" + part + "' " + why);
  };
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    const std::string part = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (part.empty()) {
      if (spec.empty()) break;
      return bad(part, "is empty (two commas in a row?)");
    }
    const size_t eq = part.find('=');
    if (eq == std::string::npos) return bad(part, "is not key=value");
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "high") {
      if (!ParseFraction(value, &c.r_high)) return bad(part, "must be a fraction in [0, 1]");
    } else if (key == "low") {
      if (!ParseFraction(value, &c.r_low)) return bad(part, "must be a fraction in [0, 1]");
    } else if (key == "hi" || key == "lo") {
      auto t = DTypeFromName(value);
      if (!t) return bad(part, "names no type (" + DTypeNameList() + ")");
      (key == "hi" ? c.types.high : c.types.low) = *t;
    } else if (key == "rank") {
      char* end = nullptr;
      const long r = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || end != value.c_str() + value.size() || r < 1 || r > 4096) {
        return bad(part, "must be an integer from 1 to 4096");
      }
      c.rank = static_cast<int>(r);
    } else if (key == "predictor") {
      if (value == "lowrank") {
        c.predictor = PredictorKind::kLowRank;
      } else if (value == "glu") {
        c.predictor = PredictorKind::kLowRankGlu;
      } else if (value == "oracle") {
        c.predictor = PredictorKind::kOracle;
      } else if (value.rfind("trained:", 0) == 0 && value.size() > 8) {
        c.predictor = PredictorKind::kTrained;
        c.predictor_file = value.substr(8);
      } else {
        return bad(part, "must be lowrank, glu, oracle or trained:FILE");
      }
    } else if (key == "units") {
      if (!ParseOnOff(value, &c.cache_units)) return bad(part, "must be on or off");
    } else if (key == "tier") {
      if (value != "dram" && value != "cuda") return bad(part, "must be dram or cuda");
      c.tier = value;
    } else if (key == "recall") {
      if (!ParseOnOff(value, &c.measure_recall)) return bad(part, "must be on or off");
    } else {
      return bad(part, "has an unknown key (high, low, hi, lo, rank, predictor, units, tier, recall)");
    }
  }
  if (c.r_high + c.r_low > 1.0 + 1e-9) {
    return Status::InvalidArgument("--m2cache '" + spec + "': high + low must be at most 1");
  }
  return c;
}

}  // namespace weir::m2cache
