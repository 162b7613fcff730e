// GluOf: the gated activation kernel (kernels::Glu) of an architecture's MLP activation, the one
// place a format::Activation becomes a kernel choice (the session's MLP providers, the MoE MLP
// and the streamed layouts take it from here). No architecture (a bare test config) means SiLU.
#pragma once

#include "format/arch_spec.h"
#include "kernels/ops.h"

namespace weir::model {

inline kernels::Glu GluOf(const format::ArchSpec* arch) {
  return arch != nullptr && arch->activation == format::Activation::kGeluTanh
             ? kernels::Glu::kGeluTanh
             : kernels::Glu::kSilu;
}

}  // namespace weir::model
