// Tokenizer encode/decode throughput on TinyStories text (data/tinystories), with the real
// vocabularies from shared/models: Llama 2's 32000-piece SentencePiece vocabulary (GGUF),
// stories260K's 512-piece tok512.bin, and TinyStories-656K's tokenizer.json (merge-list BPE).
// shared/ is $WEIR_SHARED, else ../shared relative to the working directory (run from the
// repository root). A benchmark whose files are absent reports an error and is skipped.
//
//   build/bin/tokenizer_bench --benchmark_filter=Encode
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "format/gguf_reader.h"
#include "format/tokenizer_files.h"
#include "tokenizer/tokenizer.h"

namespace {

using weir::format::TokenizerSpec;
using weir::tokenizer::Tokenizer;

std::string SharedPath(const std::string& rel) {
  const char* env = std::getenv("WEIR_SHARED");
  return std::string(env && *env ? env : "../shared") + "/" + rel;
}

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

weir::Result<TokenizerSpec> LoadSpec(int which) {
  switch (which) {
    case 0: {
      WEIR_ASSIGN_OR_RETURN(
          weir::format::GgufFile file,
          weir::format::GgufFile::Open(
              SharedPath("models/llama2-tokenizer/ggml-vocab-llama-spm.gguf")));
      return weir::format::ReadGgufTokenizer(file);
    }
    case 1:
      return weir::format::LoadLlama2cTokenizer(SharedPath("models/stories260K/tok512.bin"), 512);
    default:
      return weir::format::LoadHfTokenizerJson(
          SharedPath("models/tinystories-656k/tokenizer.json"));
  }
}

const char* const kNames[] = {"llama2_spm_32000", "tok512_spm", "tinystories656k_json_bpe"};

// Loads the tokenizer and text for a benchmark, or reports why not.
std::optional<std::pair<Tokenizer, std::string>> Setup(benchmark::State& state) {
  auto spec = LoadSpec(static_cast<int>(state.range(0)));
  if (!spec.ok()) {
    state.SkipWithError(spec.status().ToString().c_str());
    return std::nullopt;
  }
  auto tok = Tokenizer::Create(*spec);
  if (!tok.ok()) {
    state.SkipWithError(tok.status().ToString().c_str());
    return std::nullopt;
  }
  auto text = ReadText(SharedPath("data/tinystories/tinystories_val_head.txt"));
  if (!text) {
    state.SkipWithError("data/tinystories/tinystories_val_head.txt not found");
    return std::nullopt;
  }
  text->resize(std::min<size_t>(text->size(), static_cast<size_t>(state.range(1))));
  state.SetLabel(kNames[state.range(0)]);
  return std::pair{std::move(tok).value(), std::move(*text)};
}

void BM_Encode(benchmark::State& state) {
  auto setup = Setup(state);
  if (!setup) return;
  const auto& [tok, text] = *setup;
  size_t n_tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tok.Encode(text, true);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(n_tokens * state.iterations()), benchmark::Counter::kIsRate);
}
// args: (vocabulary, text bytes); 1 MiB covers the whole 794 KB text.
BENCHMARK(BM_Encode)
    ->ArgsProduct({{0, 1, 2}, {4 << 10, 1 << 20}})
    ->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  auto setup = Setup(state);
  if (!setup) return;
  const auto& [tok, text] = *setup;
  const std::vector<int32_t> ids = tok.Encode(text, true);
  for (auto _ : state) {
    std::string out;
    int32_t prev = -1;
    for (int32_t id : ids) {  // token by token, as a streaming caller does
      out += tok.Decode(prev, id);
      prev = id;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(ids.size() * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Decode)->ArgsProduct({{0, 2}, {1 << 20}})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
