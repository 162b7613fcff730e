// Fuzz target "gguf": the GGUF reader end to end. Parses the input as a GGUF file (header,
// metadata, tensor table), reads every metadata value with every typed getter, renders the
// metadata, then loads it as a model (config, tokenizer, tensor views, ValidateLlama) and, when
// that works, touches every tensor byte range, dequantizes each tensor's first row and builds
// the tokenizer from the file's vocabulary and encodes/decodes a fixed text with it.
#include <cstdint>
#include <memory>
#include <vector>

#include "format/gguf_reader.h"
#include "tensor/quantize.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Bytes : weir::format::Backing {
  std::vector<uint8_t> b;
};

volatile uint64_t g_sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::format;
  // A copy of exactly `size` bytes, owned by the file: ASan sees any read past its end.
  auto keep = std::make_shared<Bytes>();
  keep->b.assign(data, data + size);
  auto f = GgufFile::Parse("fuzz.gguf", keep->b.data(), keep->b.size(), keep);
  if (!f.ok()) return 0;
  uint64_t sink = 0;
  for (const auto& [k, v] : f->RenderMetadata()) sink += k.size() + v.size();
  for (const GgufKv& kv : f->kvs()) {
    sink += f->GetString(kv.key).ok() + f->GetU32(kv.key).ok() + f->GetI32(kv.key).ok() +
            f->GetU64(kv.key).ok() + f->GetI64(kv.key).ok() + f->GetF32(kv.key).ok() +
            f->GetBool(kv.key).ok();
    if (auto s = f->GetStringArray(kv.key); s.ok()) sink += s->size();
    if (auto a = f->GetF32Array(kv.key); a.ok()) sink += a->size();
    if (auto a = f->GetI32Array(kv.key); a.ok()) sink += a->size();
    if (auto a = f->GetI64Array(kv.key); a.ok()) sink += a->size();
  }
  for (const GgufTensorInfo& t : f->tensors()) {
    if (t.nbytes == 0) continue;
    const uint8_t* p = f->TensorData(t);
    sink += p[0] + p[t.nbytes - 1];
  }
  // The pieces a loader uses separately, then the whole loader.
  sink += ReadGgufLlamaConfig(*f).ok();
  if (auto tok = ReadGgufTokenizer(*f); tok.ok()) {
    if (auto t = weir::tokenizer::Tokenizer::Create(*tok); t.ok()) {
      std::vector<int32_t> ids = t->Encode("Hello world, \xc3\xa9t\xc3\xa9 42\n\xff", true);
      sink += t->DecodeAll(ids).size();
    }
  }
  auto m = LoadGgufModel(*f);
  if (m.ok()) {
    std::vector<float> row;
    for (const auto& [name, v] : m->tensors) {
      const uint8_t* p = static_cast<const uint8_t*>(v.data);
      sink += p[0] + p[v.nbytes() - 1];
      if (v.layout == weir::Layout::kRowMajor && v.rows() > 0) {
        row.resize(static_cast<size_t>(v.cols()));
        weir::DequantizeRow(v, 0, row.data());
        sink += row.empty() ? 0 : static_cast<uint64_t>(row[0] != 0);
      }
    }
  }
  g_sink = g_sink + sink;
  return 0;
}
