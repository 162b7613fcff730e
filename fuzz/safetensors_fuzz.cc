// Fuzz target "safetensors": the safetensors reader with its config.json. The input is
// config.json, the separator kNextFile, then the .safetensors bytes (no separator: all of it is
// the safetensors file and config.json is empty). Parses the safetensors header in memory and
// config.json as text, then writes both into a scratch folder and loads the folder as a model,
// touching every tensor byte range when it loads.
#include <cstdint>
#include <string>
#include <vector>

#include "format/hf_config.h"
#include "format/model_file.h"
#include "format/safetensors_reader.h"
#include "fuzz_util.h"

namespace {
volatile uint64_t g_sink = 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::format;
  auto [first, second] =
      weir::fuzz::SplitOnce(weir::fuzz::AsText(data, size), weir::fuzz::kNextFile);
  std::string_view config = second.data() ? first : std::string_view();
  std::string_view st = second.data() ? second : first;
  uint64_t sink = 0;
  std::vector<uint8_t> copy(st.begin(), st.end());  // exactly its size: ASan sees overreads
  if (auto h = ParseSafetensorsHeader(copy.data(), copy.size(), "fuzz.safetensors"); h.ok()) {
    sink += h->tensors.size() + h->metadata.size();
  }
  if (auto c = ParseHfLlamaConfig(config, "config.json"); c.ok()) sink += c->metadata.size();
  weir::fuzz::WriteScratch("config.json", config);
  std::string path = weir::fuzz::WriteScratch("model.safetensors", st);
  if (auto m = LoadModel(path); m.ok()) {
    for (const auto& [name, v] : m->tensors) {
      const uint8_t* p = static_cast<const uint8_t*>(v.data);
      sink += p[0] + p[v.nbytes() - 1];
    }
  }
  g_sink = g_sink + sink;
  return 0;
}
