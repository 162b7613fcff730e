// The weir.prune.* GGUF metadata a pruned model carries, so that how it was made (method, mode,
// targets per projection, what was achieved, calibration) travels with the file.
//
//   weir.prune.method                  string  global | layer | projection
//   weir.prune.mode                    string  unstructured | structured | composite
//   weir.prune.target                  f32     P
//   weir.prune.average                 string  params | uniform (how targets average to P)
//   weir.prune.alpha                   f32     outlier threshold (omega > alpha * mean)
//   weir.prune.lambda                  f32     OWL spread bound
//   weir.prune.structured_share        f32     composite: share of the target removed as units
//   weir.prune.calibration.file        string  calibration text (file name)
//   weir.prune.calibration.sequences   u32
//   weir.prune.calibration.seqlen      u32
//   weir.prune.projections             string[7]  q k v o gate up down
//   weir.prune.targets                 f32[n_layers * 7]  p_{n,m}, layer-major
//   weir.prune.sparsity                f32[n_layers * 7]  achieved: 1 - nonzero / original params
//
// Thread safety: pure function.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "format/gguf_writer.h"
#include "prune/pruner.h"
#include "prune/targets.h"

namespace weir::prune {

struct PruneProvenance {
  double alpha = 5;
  std::string calibration_file;
  int calibration_sequences = 0;
  int calibration_seqlen = 0;
};

std::vector<std::pair<std::string, format::GgufValue>> PruneMetadata(
    const PruneTargets& targets, const PruneOptions& options, const PruneReport& report,
    const PruneProvenance& provenance);

}  // namespace weir::prune
