#include "sim/synthetic_masks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>

namespace weir::sim {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform double in (0, 1).
double Uniform01(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

struct StreamState {
  std::mt19937_64 rng;
  std::vector<double> inv_weight;  // [n_units]: (rank + 1)^S, so key = log(U) * inv_weight
  std::vector<uint32_t> prev;      // previous token's active units
  std::vector<int> prev_experts;
};

class SyntheticSource : public MaskSource {
 public:
  SyntheticSource(MaskLayout layout, SyntheticSpec spec, int64_t n_tokens)
      : layout_(std::move(layout)), spec_(spec), n_tokens_(n_tokens) {
    (void)Rewind();
  }

  const MaskLayout& layout() const override { return layout_; }
  int64_t n_tokens() const override { return n_tokens_; }
  std::string Describe() const override { return DescribeSyntheticSpec(spec_); }

  Status Rewind() override {
    next_ = 0;
    states_.clear();
    states_.resize(layout_.streams.size());
    for (size_t i = 0; i < layout_.streams.size(); ++i) {
      StreamState& st = states_[i];
      st.rng.seed(SplitMix64(spec_.seed * 0x100000001B3ull + i));
      if (spec_.kind == SyntheticSpec::Kind::kZipf) {
        uint32_t n = layout_.streams[i].n_units;
        std::vector<uint32_t> perm(n);
        std::iota(perm.begin(), perm.end(), 0u);
        std::shuffle(perm.begin(), perm.end(), st.rng);
        st.inv_weight.resize(n);
        for (uint32_t rank = 0; rank < n; ++rank) {
          st.inv_weight[perm[rank]] = std::pow(static_cast<double>(rank) + 1.0, spec_.zipf_s);
        }
      }
    }
    return Status::Ok();
  }

  Result<bool> Next(TokenMasks* out) override {
    if (next_ >= n_tokens_) return false;
    out->masks.resize(layout_.streams.size());
    out->events.clear();
    for (size_t i = 0; i < layout_.streams.size(); ++i) {
      const MaskStream& s = layout_.streams[i];
      UnitMask& m = out->masks[i];
      if (m.size() != s.n_units) m.Resize(s.n_units);
      m.Clear();
      Generate(s, &states_[i], &m);
    }
    ++next_;
    return true;
  }

 private:
  void PickExperts(const MaskStream& s, StreamState* st, std::vector<int>* experts) {
    experts->clear();
    if (s.n_experts <= 1) {
      experts->push_back(0);
      return;
    }
    std::vector<uint8_t> taken(static_cast<size_t>(s.n_experts), 0);
    for (int e : st->prev_experts) {
      if (static_cast<int>(experts->size()) < s.n_experts_active &&
          Uniform01(st->rng) < spec_.repeat) {
        experts->push_back(e);
        taken[static_cast<size_t>(e)] = 1;
      }
    }
    while (static_cast<int>(experts->size()) < s.n_experts_active) {
      int e = static_cast<int>(st->rng() % static_cast<uint64_t>(s.n_experts));
      if (taken[static_cast<size_t>(e)]) continue;
      taken[static_cast<size_t>(e)] = 1;
      experts->push_back(e);
    }
    st->prev_experts = *experts;
  }

  void Generate(const MaskStream& s, StreamState* st, UnitMask* m) {
    const uint32_t block = s.n_units / static_cast<uint32_t>(s.n_experts);
    std::vector<int> experts;
    PickExperts(s, st, &experts);
    std::sort(experts.begin(), experts.end());
    // Eligible units: the picked experts' blocks (everything for a dense MLP).
    eligible_.clear();
    for (int e : experts) {
      for (uint32_t j = 0; j < block; ++j)
        eligible_.push_back(static_cast<uint32_t>(e) * block + j);
    }
    switch (spec_.kind) {
      case SyntheticSpec::Kind::kDense:
        for (uint32_t u : eligible_) m->Set(u);
        break;
      case SyntheticSpec::Kind::kUniform:
        for (uint32_t u : eligible_) {
          if (Uniform01(st->rng) < spec_.density) m->Set(u);
        }
        break;
      case SyntheticSpec::Kind::kZipf:
        GenerateZipf(st, m);
        break;
    }
  }

  void GenerateZipf(StreamState* st, UnitMask* m) {
    const size_t k = static_cast<size_t>(std::llround(spec_.density * eligible_.size()));
    // Keep round(R * k) of the previous active units that are still eligible.
    std::vector<uint32_t> carry;
    for (uint32_t u : st->prev) {
      if (std::binary_search(eligible_.begin(), eligible_.end(), u)) carry.push_back(u);
    }
    size_t keep = std::min(carry.size(), static_cast<size_t>(std::llround(spec_.repeat * k)));
    for (size_t i = 0; i < keep; ++i) {  // partial Fisher-Yates
      size_t j = i + static_cast<size_t>(st->rng() % (carry.size() - i));
      std::swap(carry[i], carry[j]);
      m->Set(carry[i]);
    }
    // Draw the rest without replacement, proportional to weight: the largest log(U) / w.
    size_t need = k - keep;
    keyed_.clear();
    for (uint32_t u : eligible_) {
      if (m->Test(u)) continue;
      keyed_.push_back({std::log(Uniform01(st->rng)) * st->inv_weight[u], u});
    }
    need = std::min(need, keyed_.size());
    if (need > 0) {
      std::nth_element(keyed_.begin(), keyed_.begin() + static_cast<ptrdiff_t>(need - 1),
                       keyed_.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t i = 0; i < need; ++i) m->Set(keyed_[i].second);
    }
    st->prev.clear();
    m->AppendActive(&st->prev);
  }

  MaskLayout layout_;
  SyntheticSpec spec_;
  int64_t n_tokens_;
  int64_t next_ = 0;
  std::vector<StreamState> states_;
  std::vector<uint32_t> eligible_;
  std::vector<std::pair<double, uint32_t>> keyed_;
};

Result<double> ParseNumber(const std::string& spec, const std::string& text, double lo, double hi) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= lo && v <= hi)) {
    return Status::InvalidArgument(StrFormat("--masks '%s': '%s' is not a number in [%g, %g]",
                                             spec.c_str(), text.c_str(), lo, hi));
  }
  return v;
}

}  // namespace

Result<SyntheticSpec> ParseSyntheticSpec(const std::string& text) {
  SyntheticSpec spec;
  size_t colon = text.find(':');
  std::string kind = text.substr(0, colon);
  std::string args = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (kind == "dense") {
    if (!args.empty()) {
      return Status::InvalidArgument(
          StrFormat("--masks '%s': dense takes no parameters", text.c_str()));
    }
    return spec;
  }
  if (kind == "uniform") {
    spec.kind = SyntheticSpec::Kind::kUniform;
  } else if (kind == "zipf") {
    spec.kind = SyntheticSpec::Kind::kZipf;
  } else {
    return Status::InvalidArgument(StrFormat(
        "--masks '%s': expected dense, uniform:D, zipf:d=D,s=S,r=R or trace:FILE", text.c_str()));
  }
  if (args.empty()) {
    return Status::InvalidArgument(StrFormat("--masks '%s': %s needs a density, e.g. %s:0.5",
                                             text.c_str(), kind.c_str(), kind.c_str()));
  }
  std::stringstream ss(args);
  bool have_density = false;
  int positional = 0;
  for (std::string part; std::getline(ss, part, ',');) {
    size_t eq = part.find('=');
    std::string key, value;
    if (eq == std::string::npos) {
      const char* order[] = {"d", "s", "r"};
      if (positional >= (spec.kind == SyntheticSpec::Kind::kZipf ? 3 : 1)) {
        return Status::InvalidArgument(StrFormat("--masks '%s': too many values", text.c_str()));
      }
      key = order[positional++];
      value = part;
    } else {
      key = part.substr(0, eq);
      value = part.substr(eq + 1);
    }
    if (key == "d") {
      WEIR_ASSIGN_OR_RETURN(spec.density, ParseNumber(text, value, 0, 1));
      have_density = true;
    } else if (key == "seed") {
      WEIR_ASSIGN_OR_RETURN(double v, ParseNumber(text, value, 0, 9.007199254740992e15));
      spec.seed = static_cast<uint64_t>(v);
    } else if (key == "s" && spec.kind == SyntheticSpec::Kind::kZipf) {
      WEIR_ASSIGN_OR_RETURN(spec.zipf_s, ParseNumber(text, value, 0, 10));
    } else if (key == "r" && spec.kind == SyntheticSpec::Kind::kZipf) {
      WEIR_ASSIGN_OR_RETURN(spec.repeat, ParseNumber(text, value, 0, 1));
    } else {
      return Status::InvalidArgument(StrFormat("--masks '%s': unknown parameter '%s' for %s",
                                               text.c_str(), key.c_str(), kind.c_str()));
    }
  }
  if (!have_density) {
    return Status::InvalidArgument(StrFormat("--masks '%s': missing the density d", text.c_str()));
  }
  return spec;
}

std::string DescribeSyntheticSpec(const SyntheticSpec& s) {
  switch (s.kind) {
    case SyntheticSpec::Kind::kDense:
      return "dense";
    case SyntheticSpec::Kind::kUniform:
      return StrFormat("uniform:d=%g,seed=%llu", s.density,
                       static_cast<unsigned long long>(s.seed));
    case SyntheticSpec::Kind::kZipf:
      return StrFormat("zipf:d=%g,s=%g,r=%g,seed=%llu", s.density, s.zipf_s, s.repeat,
                       static_cast<unsigned long long>(s.seed));
  }
  return "?";
}

Result<std::unique_ptr<MaskSource>> MakeSyntheticSource(MaskLayout layout,
                                                        const SyntheticSpec& spec,
                                                        int64_t n_tokens) {
  if (n_tokens <= 0) {
    return Status::InvalidArgument(StrFormat("synthetic masks: %lld tokens; need at least 1",
                                             static_cast<long long>(n_tokens)));
  }
  if (layout.streams.empty()) return Status::InvalidArgument("synthetic masks: no streams");
  for (const MaskStream& s : layout.streams) {
    if (s.n_units == 0 || s.n_experts < 1 || s.n_units % static_cast<uint32_t>(s.n_experts) != 0 ||
        s.n_experts_active < 1 || s.n_experts_active > s.n_experts) {
      return Status::InvalidArgument(
          StrFormat("synthetic masks: stream '%s' layer %d has %u units "
                    "in %d experts (%d active)",
                    s.name.c_str(), s.layer, s.n_units, s.n_experts, s.n_experts_active));
    }
  }
  return std::unique_ptr<MaskSource>(new SyntheticSource(std::move(layout), spec, n_tokens));
}

}  // namespace weir::sim
