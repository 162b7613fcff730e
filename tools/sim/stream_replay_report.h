// `weir sim --masks trace:FILE` for a block trace of a streamed pack: the replay runs the engine's
// own cache (model/stream_replay.h), prints recorded against replayed counters, and estimates
// the run's time on a device profile from the replayed traffic (docs/simulator.md, "Replaying
// a streamed run").
#pragma once

#include <string>

#include "base/status.h"
#include "sim/device_profile.h"

namespace weir::tools {

// True when the trace at `path` is a block trace of a streamed run (metadata
// trace.source=streaming).
Result<bool> IsStreamTrace(const std::string& path);

struct StreamReplayFlags {
  std::string pack;           // --model: the pack the run streamed
  std::string trace;          // the trace file
  std::string policy;         // "" = recorded
  uint64_t memory_budget = 0;  // 0 = recorded (--dram)
  int64_t warmup = 0;          // decode steps not counted in the time estimate
  bool json = false;
};
int StreamReplayMain(const StreamReplayFlags& flags, const sim::DeviceProfile& device);

}  // namespace weir::tools
