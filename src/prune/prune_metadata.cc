#include "prune/prune_metadata.h"

namespace weir::prune {

std::vector<std::pair<std::string, format::GgufValue>> PruneMetadata(const PruneTargets& targets,
                                                                     const PruneOptions& options,
                                                                     const PruneReport& report,
                                                                     const PruneProvenance& prov) {
  using format::GgufValue;
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("weir.prune.method", GgufValue::String(TargetMethodName(targets.method)));
  kv.emplace_back("weir.prune.mode", GgufValue::String(PruneModeName(options.mode)));
  kv.emplace_back("weir.prune.target", GgufValue::F32(static_cast<float>(targets.target)));
  kv.emplace_back("weir.prune.average",
                  GgufValue::String(TargetAverageName(targets.options.average)));
  kv.emplace_back("weir.prune.alpha", GgufValue::F32(static_cast<float>(prov.alpha)));
  kv.emplace_back("weir.prune.lambda", GgufValue::F32(static_cast<float>(targets.options.lambda)));
  if (options.mode == PruneMode::kComposite) {
    kv.emplace_back("weir.prune.structured_share",
                    GgufValue::F32(static_cast<float>(options.structured_share)));
  }
  kv.emplace_back("weir.prune.calibration.file", GgufValue::String(prov.calibration_file));
  kv.emplace_back("weir.prune.calibration.sequences",
                  GgufValue::U32(static_cast<uint32_t>(prov.calibration_sequences)));
  kv.emplace_back("weir.prune.calibration.seqlen",
                  GgufValue::U32(static_cast<uint32_t>(prov.calibration_seqlen)));
  std::vector<std::string> names;
  for (Projection p : kAllProjections) names.emplace_back(ProjectionName(p));
  kv.emplace_back("weir.prune.projections", GgufValue::StringArray(names));
  std::vector<float> t, s;
  for (size_t l = 0; l < targets.sparsity.size(); ++l) {
    for (int p = 0; p < kNumProjections; ++p) {
      t.push_back(static_cast<float>(targets.sparsity[l][static_cast<size_t>(p)]));
      s.push_back(l < report.projections.size()
                      ? static_cast<float>(report.projections[l][static_cast<size_t>(p)].sparsity())
                      : 0.0f);
    }
  }
  kv.emplace_back("weir.prune.targets", GgufValue::F32Array(t));
  kv.emplace_back("weir.prune.sparsity", GgufValue::F32Array(s));
  return kv;
}

}  // namespace weir::prune
