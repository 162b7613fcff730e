#include "common/trace_flags.h"

namespace weir::tools {

void AddTraceFlags(CLI::App& app, TraceFlags* f) {
  app.add_option("--trace", f->path,
                 "record a trace (docs/simulator.md): per token the MLP units used (for a mixture "
                 "of experts, the experts each layer chose), or for a "
                 "streamed pack per step and layer the blocks used and the cache events; replay it "
                 "with `weir sim --masks trace:FILE`");
}

Result<std::unique_ptr<model::TraceRecorder>> StartTrace(const TraceFlags& tf,
                                                         model::Session& session,
                                                         const RunModel* run,
                                                         const std::string& sparsity) {
  if (tf.path.empty()) return std::unique_ptr<model::TraceRecorder>();
  const format::LlamaConfig& config = session.model().config();
  std::unique_ptr<model::TraceRecorder> r;
  if (run != nullptr && run->streaming) {
    model::StreamingWeights& streamed = run->streaming->streamer();
    auto metadata = model::StreamTraceMetadata(*run->streaming);
    metadata.emplace_back("sparsity", sparsity);
    WEIR_ASSIGN_OR_RETURN(format::TraceHeader h,
                          model::StreamTraceHeader(config, streamed, std::move(metadata)));
    WEIR_ASSIGN_OR_RETURN(r, model::TraceRecorder::CreateFile(tf.path, h, config, &streamed));
  } else {
    // A mixture of experts records its routing (experts per token and layer), a dense model
    // the MLP units it read.
    format::TraceHeader h = config.n_expert > 0
                                ? model::ExpertTraceHeader(config, {{"sparsity", sparsity}})
                                : model::NeuronTraceHeader(config, {{"sparsity", sparsity}});
    WEIR_ASSIGN_OR_RETURN(r, model::TraceRecorder::CreateFile(tf.path, h, config, nullptr));
  }
  session.set_observer(r.get());
  return r;
}

}  // namespace weir::tools
