// Fuzz target "gguf_forward": a GGUF that loads as a model is run. The input is parsed and loaded
// as in the "gguf" target; a model that validates is wrapped in a Model and a Session (context 8,
// one thread) that runs a prompt of two tokens and one decode step. Hostile hyperparameters
// (epsilon, RoPE base, head counts, per-layer dimensions) and weights (NaN, Inf, denormal scales)
// must give an error or numbers, never a crash or undefined behaviour.
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "format/gguf_reader.h"
#include "model/model.h"
#include "model/session.h"

namespace {

struct Bytes : weir::format::Backing {
  std::vector<uint8_t> b;
};

volatile float g_sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir;
  static ThreadPool* pool = new ThreadPool(1);
  auto keep = std::make_shared<Bytes>();
  keep->b.assign(data, data + size);
  auto f = format::GgufFile::Parse("fuzz.gguf", keep->b.data(), keep->b.size(), keep);
  if (!f.ok()) return 0;
  auto file = format::LoadGgufModel(*f);
  if (!file.ok()) return 0;
  auto model = model::Model::FromFile(std::move(file).value());
  if (!model.ok()) return 0;
  model::SessionOptions so;
  so.ctx = 8;
  so.n_batch = 2;
  auto session = model::Session::Create(**model, pool, so);
  if (!session.ok()) return 0;
  const int32_t vocab = (*model)->config().vocab_size;
  std::vector<int32_t> prompt = {0, vocab - 1};
  auto logits = (*session)->Prefill(prompt);
  if (!logits.ok()) return 0;
  float sum = (*logits)[0] + (*logits)[vocab - 1];
  const int32_t next = 1 % vocab;
  auto step = (*session)->Forward(std::span<const int32_t>(&next, 1), model::LogitsFor::kLast);
  if (step.ok()) sum += (*step)[0];
  g_sink = g_sink + sum;
  return 0;
}
