// weir pack: re-lays a model for streaming from storage (format/weir_pack_format.h): static
// tensors whole, MLP weights as neuron bundles interleaved by (channel, layer, operator) in
// layer groups, every tensor 4 KiB-aligned. The source is only read.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/units.h"
#include "common/cli.h"
#include "common/commands.h"
#include "format/model_file.h"
#include "format/weir_pack_format.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "sparsity/calibration.h"

namespace weir::tools {

int PackMain(int argc, char** argv) {
  CLI::App app("Write a model as a weir pack for streaming (`weir run --memory`).", "pack");
  std::string in, out, type, tokenizer;
  format::PackOptions options;
  bool json = false, no_progress = false;
  app.add_option("-m,--model", in, "input model (GGUF, safetensors or llama2.c)")->required();
  app.add_option("--tokenizer", tokenizer,
                 "tokenizer file to use instead of the one beside the model");
  app.add_option("-o,--output", out, "output pack (by convention MODEL.weir)")->required();
  app.add_option(
         "--group", options.group_size,
         "layers per group: one read fetches a neuron's bundle for this many layers (default 1)")
      ->check(CLI::Range(1, format::kMaxPackGroupSize));
  app.add_option("--type", type,
                 "convert weights to " + DTypeNameList() + " first (default: keep)");
  std::string layout = "bundles";
  app.add_option("--layout", layout,
                 "MLP layout: bundles (dense streaming: one read per neuron's gate, up and down) "
                 "or columns (sparse streaming with --sparsity dip/dip-ca/glu: input-channel and "
                 "neuron columns; with --group N and --sparsity dip:D,span=N,down=1 1.35-1.5x "
                 "bundles at half a generated 1.1B's size, about even at a quarter: "
                 "docs/streaming.md 3.8), or "
                 "sparse-columns (columns stored as bitmap + non-zero values: "
                 "for models pruned with `weir prune --mode unstructured`), or experts (a mixture "
                 "of experts, its default: one page-aligned record per expert, read and cached "
                 "whole), or experts-columns (a mixture of experts for --sparsity dip|dip-ca|glu "
                 "inside streamed experts: each expert's gate and up stored as channel records, "
                 "gate^T and up^T rows of an input channel together, then W_down; a streamed "
                 "expert reads only its kept channels' records, and W_down unless the cache "
                 "holds a copy of it, in one compact read; f32/f16/bf16/q8_0/q4_0 experts, "
                 "transposes requantized as for columns; docs/moe.md)")
      ->check(CLI::IsMember({"bundles", "columns", "sparse-columns", "experts",
                             "experts-columns"}));
  std::string calib;
  app.add_option("--calib", calib,
                 "column layouts: a calibration file (weir calibrate) whose per-channel counts "
                 "order each layer group's input channels and neurons hottest first, so that "
                 "columns kept together share pages and reads; a mixture of experts: its "
                 "per-layer routing counts store each layer's experts most chosen first, which "
                 "--policy hot keeps (default: the model's order)");
  app.add_flag("--json", json, "print a JSON summary");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  options.layout = layout == "columns"          ? format::PackLayout::kColumns
                   : layout == "sparse-columns" ? format::PackLayout::kSparseColumns
                   : layout == "experts" || layout == "experts-columns"
                       ? format::PackLayout::kExperts
                       : format::PackLayout::kBundles;
  options.expert_columns = layout == "experts-columns";
  if (!type.empty()) {
    options.type = DTypeFromName(type);
    if (!options.type) {
      std::fprintf(stderr, "weir pack: unknown --type '%s' (%s)\n", type.c_str(),
                   DTypeNameList().c_str());
      return kExitUsage;
    }
  }
  format::LoadOptions opt;
  opt.tokenizer_path = tokenizer;
  auto mf = format::LoadModel(in, opt);
  if (!mf.ok()) return Fail("pack", mf.status());
  if (mf->config.IsMoe()) {
    if (app.count("--layout") > 0 && options.layout != format::PackLayout::kExperts) {
      return Fail("pack", Status::InvalidArgument(
                              "--layout " + layout + ": " + in +
                              " is a mixture of experts, packed with --layout experts or experts-columns"));
    }
    options.layout = format::PackLayout::kExperts;
  }
  if (!calib.empty()) {
    const bool experts = options.layout == format::PackLayout::kExperts;
    if (!experts && !format::IsColumnLayout(options.layout)) {
      std::fprintf(stderr, "weir pack: --calib orders column packs: add --layout columns\n");
      return kExitUsage;
    }
    auto c = sparsity::Calibration::Load(calib);
    if (!c.ok()) return Fail("pack", c.status());
    if (c->n_layer() != mf->config.n_layers) {
      return Fail("pack", Status::InvalidArgument(StrFormat(
                              "%s has %d layers, the model %d", calib.c_str(), c->n_layer(),
                              mf->config.n_layers)));
    }
    for (int l = 0; experts && l < c->n_layer(); ++l) {
      const std::vector<uint32_t>& counts = c->expert_chosen[static_cast<size_t>(l)];
      if (static_cast<int>(counts.size()) != mf->config.n_expert) {
        return Fail("pack", Status::InvalidArgument(StrFormat(
                                "%s: layer %d has %zu expert routing counts (expert_chosen), the "
                                "model %d experts; calibrate this model with this version of weir "
                                "calibrate",
                                calib.c_str(), l, counts.size(), mf->config.n_expert)));
      }
      options.expert_score.emplace_back(counts.begin(), counts.end());
    }
    for (int l = 0; !experts && l < c->n_layer(); ++l) {
      for (auto [stat, out] : {std::pair{sparsity::CalibStat::kMlpIn, &options.in_score},
                               std::pair{sparsity::CalibStat::kMlpDown, &options.down_score}}) {
        const sparsity::SampleSet& s = c->samples(l, stat);
        if (s.kept_half.empty()) {
          return Fail("pack", Status::InvalidArgument(StrFormat(
                                  "%s: layer %d has no per-channel '%s' counts (kept_half); "
                                  "write it again with this version of weir calibrate",
                                  calib.c_str(), l,
                                  std::string(sparsity::CalibStatName(stat)).c_str())));
        }
        out->emplace_back(s.kept_half.begin(), s.kept_half.end());
      }
    }
  }
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(in, out, ec)) {
    return Fail("pack", Status::InvalidArgument("output " + out +
                                                " is the input file; refusing to overwrite it"));
  }
  // Say when the MLP weights are stored in another type than the source's (PackMlpType: a
  // bundle holds one type of 32-value blocks).
  std::string converted;
  if (!mf->config.IsMoe() && !options.type) {
    std::set<std::string> from;
    DType to = DType::kF32;
    for (int l = 0; l < mf->config.n_layers; ++l) {
      std::vector<DType> sources;
      for (const char* t : {"ffn_gate", "ffn_up", "ffn_down"}) {
        const TensorView* v = mf->Find(StrFormat("blk.%d.%s.weight", l, t));
        if (v != nullptr) sources.push_back(v->dtype);
      }
      to = format::PackMlpType(sources, std::nullopt);
      for (DType s : sources) {
        if (s != to) from.insert(DTypeName(s));
      }
    }
    for (const std::string& f : from) converted += (converted.empty() ? "" : ", ") + f;
    if (!converted.empty() && !json) {
      std::fprintf(stderr,
                   "weir pack: MLP weights of type %s stored as %s (a bundle holds one type of "
                   "32-value blocks; --type chooses another)\n",
                   converted.c_str(), DTypeName(to));
    }
  }
  ProgressBar bar("pack", 1000, !json && !no_progress);
  Status st = format::WritePack(*mf, out, options,
                                [&](double f) { bar.Update(static_cast<uint64_t>(f * 1000)); });
  bar.Finish();
  if (!st.ok()) return Fail("pack", st);
  auto pack = format::PackFile::Open(out);  // read back: what was written is a valid pack
  if (!pack.ok()) return Fail("pack", pack.status());
  if (json) {
    PrintJson({{"input", in},
               {"output", out},
               {"group_size", options.group_size},
               {"layout", format::PackLayoutName(pack->layout())},
               {"groups", pack->groups().size()},
               {"static_bytes", pack->static_bytes()},
               {"bundle_bytes", pack->bundle_bytes()},
               {"file_bytes", pack->file_size()},
               {"down_t", pack->down_t()},
               {"mlp_converted_from", converted}});
  } else {
    std::printf(
        "wrote %s: %zu layer groups of up to %d layers, %s static + %s MLP %s (%s file)%s\n",
        out.c_str(), pack->groups().size(), options.group_size,
        FormatBytes(pack->static_bytes()).c_str(), FormatBytes(pack->bundle_bytes()).c_str(),
        format::PackLayoutName(pack->layout()), FormatBytes(pack->file_size()).c_str(),
        format::IsColumnLayout(pack->layout()) ? (", ffn_down^T " + pack->down_t()).c_str() : "");
  }
  return kExitOk;
}

}  // namespace weir::tools
