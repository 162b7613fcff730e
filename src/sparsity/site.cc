#include "sparsity/site.h"

namespace weir::sparsity {

std::string_view SiteName(Site site) {
  switch (site) {
    case Site::kAttnIn:
      return "attn_in";
    case Site::kAttnOut:
      return "attn_out";
    case Site::kMlpIn:
      return "mlp_in";
    case Site::kMlpDown:
      return "mlp_down";
  }
  return "?";
}

std::string_view UnitPredictorName(UnitPredictor p) {
  switch (p) {
    case UnitPredictor::kNone:
      return "none";
    case UnitPredictor::kGate:
      return "gate";
    case UnitPredictor::kUp:
      return "up";
  }
  return "?";
}

int64_t SiteWidth(const LayerDims& dims, Site site) {
  switch (site) {
    case Site::kAttnIn:
      return dims.d_model;
    case Site::kAttnOut:
      return dims.q_dim;
    case Site::kMlpIn:
      return dims.d_model;
    case Site::kMlpDown:
      return dims.d_ff;
  }
  return 0;
}

}  // namespace weir::sparsity
