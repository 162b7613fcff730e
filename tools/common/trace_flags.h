// `--trace FILE` of weir run, ppl and bench, declared once: what it records (model/trace_recorder.h)
// depends on the model -- neuron masks for a model run resident (the MLP units the sparsity
// policy chose, every unit when dense), block accesses and cache events for a streamed pack.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "base/status.h"
#include "common/streaming_flags.h"
#include "model/session.h"
#include "model/trace_recorder.h"

namespace weir::tools {

struct TraceFlags {
  std::string path;  // --trace FILE; "" = none
};
void AddTraceFlags(CLI::App& app, TraceFlags* flags);

// Before LoadRunModel: a streamed run must record its block accesses.
inline void ConfigureTrace(const TraceFlags& tf, StreamingFlags* sf) {
  sf->record_trace = !tf.path.empty();
}

// Creates the recorder and makes it the session's observer; null when --trace was not given.
// `run` is the model being run (null for tools that never stream); `sparsity` names the policy
// for the neuron trace's metadata. Call before the session's first Forward.
Result<std::unique_ptr<model::TraceRecorder>> StartTrace(const TraceFlags& tf,
                                                         model::Session& session,
                                                         const RunModel* run,
                                                         const std::string& sparsity);

}  // namespace weir::tools
