// Fuzz target "pack": the weir pack reader. Parses the input as a GGUF container, validates it
// as a pack (weir.pack.* keys, groups, bundle / column tensors, statics) and reads back
// everything `weir inspect` and the streaming engine ask of an open pack.
#include <cstdint>
#include <memory>
#include <vector>

#include "format/gguf_reader.h"
#include "format/weir_pack_reader.h"

namespace {

struct Bytes : weir::format::Backing {
  std::vector<uint8_t> b;
};

volatile uint64_t g_sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::format;
  auto keep = std::make_shared<Bytes>();
  keep->b.assign(data, data + size);
  auto f = GgufFile::Parse("fuzz.weir", keep->b.data(), keep->b.size(), keep);
  if (!f.ok()) return 0;
  uint64_t sink = PackFile::IsPack(*f);
  auto p = PackFile::FromGguf(std::move(f).value());
  if (!p.ok()) return 0;
  sink += p->static_bytes() + p->bundle_bytes() + p->file_size();
  for (const PackTensor& t : p->static_tensors()) {
    // The reader promised these ranges are inside the file: ASan checks the promise.
    if (t.nbytes > 0) sink += keep->b[t.offset] + keep->b[t.offset + t.nbytes - 1];
    sink += p->FindStatic(t.name) != nullptr;
  }
  for (int l = 0; l < p->config().n_layers; ++l) sink += p->GroupOf(l).first_layer;
  for (const PackGroup& g : p->groups()) {
    if (g.nbytes > 0) sink += keep->b[g.offset] + keep->b[g.offset + g.nbytes - 1];
    if (g.in_nbytes > 0) sink += keep->b[g.in_offset] + keep->b[g.in_offset + g.in_nbytes - 1];
  }
  for (const auto& [k, v] : p->RenderMetadata()) sink += k.size() + v.size();
  sink += p->tokenizer().tokens.size();
  g_sink = g_sink + sink;
  return 0;
}
