// Inputs shared by `weir sim` and `weir plan`: resolving --model (a preset or a real model
// file), --device (a profile name or a JSON path), and --masks (a synthetic spec or a trace).
// This is where weir::sim meets weir::format: the simulator library knows neither files nor
// traces, the tools adapt them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/model_file.h"
#include "sim/device_profile.h"
#include "sim/mask_source.h"
#include "sim/model_shape.h"

namespace weir::tools {

struct SimModel {
  sim::ModelShape shape;
  std::optional<sim::WeightBits> file_bits;  // bits per weight of a real file's tensors
  std::string origin;                        // "preset" or the path
};

// A preset name (sim::ModelPresetNames), a weir pack, or a path that format::LoadModel opens.
Result<SimModel> ResolveModel(const std::string& spec);
// The shape and bits of a weir pack (its static tensors and its MLP groups' type).
Result<SimModel> ModelFromPack(const std::string& path);
// The shape and bits of a loaded model (for `weir run --plan auto` and ResolveModel).
Result<SimModel> ModelFromFile(const format::ModelFile& model);

// Profile lookup: an existing path (or a name ending in .json) is loaded as is; otherwise
// NAME.json is searched in $WEIR_PROFILES (':'-separated), ./profiles, and the profiles/
// folder of the source tree the binary was built from (found from /proc/self/exe).
Result<sim::DeviceProfile> ResolveDevice(const std::string& spec);
std::vector<std::string> ProfileDirs();
// The default output path of `weir probe`: the first existing profiles folder, + name.json.
std::string DefaultProfilePath(const std::string& name);

// "trace:FILE" opens a trace (its header defines the streams; `stream_set` and `tokens` are
// ignored); anything else is a synthetic spec (sim/synthetic_masks.h) over `stream_set`.
Result<std::unique_ptr<sim::MaskSource>> MakeMaskSource(const std::string& spec,
                                                        const sim::ModelShape& shape,
                                                        sim::StreamSet stream_set, int64_t tokens);

}  // namespace weir::tools
