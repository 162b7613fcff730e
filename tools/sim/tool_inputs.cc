#include "sim/tool_inputs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <sstream>

#include "format/gguf_reader.h"
#include "format/model_file.h"
#include "format/weir_pack_reader.h"
#include "sim/synthetic_masks.h"
#include "sim/trace_source.h"

namespace weir::tools {
namespace {

bool IsFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string ExeDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

// "blk.12.ffn_up.weight" -> ffn_up; "token_embd.weight" -> token_embd; norms -> norm.
std::optional<sim::TensorKind> KindOfTensor(const std::string& name) {
  std::string base = name;
  if (base.rfind("blk.", 0) == 0) {
    size_t dot = base.find('.', 4);
    if (dot == std::string::npos) return std::nullopt;
    base = base.substr(dot + 1);
  }
  for (const std::string suffix : {".weight", "_exps"}) {  // ffn_up_exps: stacked experts
    if (base.size() > suffix.size() &&
        base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
      base.resize(base.size() - suffix.size());
    }
  }
  if (base == "attn_norm" || base == "ffn_norm" || base == "output_norm") {
    return sim::TensorKind::kNorm;
  }
  return sim::TensorKindFromName(base);
}

}  // namespace

Result<SimModel> ResolveModel(const std::string& spec) {
  auto preset = sim::ModelPreset(spec);
  if (preset.ok()) return SimModel{*preset, std::nullopt, "preset"};
  if (!IsFile(spec) && !IsDir(spec)) {
    return Status::NotFound(StrFormat("--model '%s' is neither a preset nor a file (%s)",
                                      spec.c_str(), preset.status().message().c_str()));
  }
  if (IsFile(spec)) {
    if (auto gguf = format::GgufFile::Open(spec); gguf.ok() && format::PackFile::IsPack(*gguf)) {
      return ModelFromPack(spec);
    }
  }
  WEIR_ASSIGN_OR_RETURN(format::ModelFile mf, format::LoadModel(spec));
  return ModelFromFile(mf);
}

Result<SimModel> ModelFromPack(const std::string& path) {
  // The shape and bits from the pack: its static tensors and its MLP's stand-ins (views by
  // shape only: nothing is read).
  WEIR_ASSIGN_OR_RETURN(format::PackFile p, format::PackFile::Open(path));
  format::ModelFile file;
  file.path = path;
  file.config = p.config();
  for (const format::PackTensor& t : p.static_tensors()) {
    file.tensors.emplace(t.name, TensorView{t.dtype, t.shape, nullptr});
  }
  p.AddMlpStandIns(&file);
  return ModelFromFile(file);
}

Result<SimModel> ModelFromFile(const format::ModelFile& mf) {
  const format::LlamaConfig& c = mf.config;
  SimModel m;
  m.origin = mf.path;
  sim::ModelShape& s = m.shape;
  size_t slash = mf.path.rfind('/');
  s.name = slash == std::string::npos ? mf.path : mf.path.substr(slash + 1);
  s.d_model = c.d_model;
  s.n_layers = c.n_layers;
  s.head_dim = c.head_dim;
  s.vocab_size = c.vocab_size;
  s.tied_output = c.tied_output;
  if (c.n_expert > 0) {  // d_ff is each expert's width
    s.n_experts = c.n_expert;
    s.n_experts_active = c.n_expert_used;
  }
  for (const format::LayerDims& L : c.layers) s.layers.push_back({L.n_head, L.n_head_kv, L.d_ff});
  WEIR_RETURN_IF_ERROR(sim::ValidateShape(s));
  // Bits per weight of each kind: stored bytes over elements.
  std::array<double, sim::kNumTensorKinds> bytes{}, elems{};
  for (const auto& [name, view] : mf.tensors) {
    auto kind = KindOfTensor(name);
    if (!kind) continue;
    bytes[static_cast<int>(*kind)] += static_cast<double>(view.nbytes());
    elems[static_cast<int>(*kind)] += static_cast<double>(view.shape.numel());
  }
  sim::WeightBits bits = sim::WeightBits::Uniform(16);
  for (int k = 0; k < sim::kNumTensorKinds; ++k) {
    if (elems[k] > 0) bits.bits[k] = 8 * bytes[k] / elems[k];
  }
  m.file_bits = bits;
  return m;
}

std::vector<std::string> ProfileDirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("WEIR_PROFILES")) {
    std::stringstream ss(env);
    for (std::string d; std::getline(ss, d, ':');) {
      if (!d.empty()) dirs.push_back(d);
    }
  }
  dirs.push_back("profiles");
  std::string exe = ExeDir();
  if (!exe.empty()) {
    // build*/bin/weir -> the source tree's profiles/ next to the build folder.
    dirs.push_back(exe + "/../../profiles");
    dirs.push_back(exe + "/../profiles");
  }
#ifdef WEIR_SOURCE_PROFILES
  // The source tree this binary was built from, wherever its build folder is.
  dirs.push_back(WEIR_SOURCE_PROFILES);
#endif
  return dirs;
}

std::string DefaultProfilePath(const std::string& name) {
  for (const std::string& d : ProfileDirs()) {
    if (IsDir(d)) return d + "/" + name + ".json";
  }
  return name + ".json";
}

Result<sim::DeviceProfile> ResolveDevice(const std::string& spec) {
  bool looks_like_path = spec.find('/') != std::string::npos ||
                         (spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".json") == 0);
  if (looks_like_path || IsFile(spec)) return sim::LoadDeviceProfile(spec);
  std::string tried;
  for (const std::string& d : ProfileDirs()) {
    std::string p = d + "/" + spec + ".json";
    if (IsFile(p)) return sim::LoadDeviceProfile(p);
    tried += (tried.empty() ? "" : ", ") + p;
  }
  return Status::NotFound(
      StrFormat("no device profile '%s' (looked for %s; `weir probe` writes "
                "this-machine.json)",
                spec.c_str(), tried.c_str()));
}

Result<std::unique_ptr<sim::MaskSource>> MakeMaskSource(const std::string& spec,
                                                        const sim::ModelShape& shape,
                                                        sim::StreamSet stream_set, int64_t tokens) {
  if (spec.rfind("trace:", 0) == 0) {
    WEIR_ASSIGN_OR_RETURN(auto src, TraceMaskSource::Open(spec.substr(6), shape));
    return std::unique_ptr<sim::MaskSource>(std::move(src));
  }
  WEIR_ASSIGN_OR_RETURN(sim::SyntheticSpec s, sim::ParseSyntheticSpec(spec));
  WEIR_ASSIGN_OR_RETURN(sim::MaskLayout layout, sim::MakeMaskLayout(shape, stream_set));
  return sim::MakeSyntheticSource(std::move(layout), s, tokens);
}

}  // namespace weir::tools
