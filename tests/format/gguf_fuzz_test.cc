// Fuzz-style robustness of the GGUF reader: a small synthesized model truncated at every section
// boundary and at every byte of its header, metadata and tensor infos, and thousands of
// mutated copies (random bytes, hostile integers in count/length fields, bit flips), with fixed
// seeds. Each must give an error or a valid model -- never a crash, hang or huge allocation.
// Every case parses a buffer of exactly the file's (truncated) size, so an address-sanitized
// build (-DWEIR_SANITIZE=ON) reports any read past the end; run that build with
// ASAN_OPTIONS=max_allocation_size_mb=64 to turn any large allocation into a failure too.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "format/gguf_reader.h"
#include "format/synth_llama.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

struct Bytes : Backing {
  std::vector<uint8_t> b;
};

struct Outcome {
  int errors = 0;
  int models = 0;  // loaded as a model
  int files = 0;   // parsed, but not a valid model
};

// Parses and, when that works, exercises everything a user of the file would touch.
// Returns true when the bytes loaded as a valid model.
bool Exercise(const std::vector<uint8_t>& data, Outcome* out, uint64_t* sink) {
  auto keep = std::make_shared<Bytes>();
  keep->b = data;  // exactly data.size() bytes: a sanitizer sees any overread
  auto f = GgufFile::Parse("fuzz.gguf", keep->b.data(), keep->b.size(), keep);
  if (!f.ok()) {
    ++out->errors;
    EXPECT_FALSE(f.status().message().empty());
    EXPECT_EQ(f.status().message().find('\n'), std::string::npos) << f.status().message();
    return false;
  }
  for (const auto& [k, v] : f->RenderMetadata()) *sink += k.size() + v.size();
  for (const GgufKv& kv : f->kvs()) {
    // Every getter on every key: values or type errors, nothing else.
    *sink += f->GetString(kv.key).ok() + f->GetU32(kv.key).ok() + f->GetI64(kv.key).ok() +
             f->GetF32(kv.key).ok() + f->GetBool(kv.key).ok();
    if (auto s = f->GetStringArray(kv.key); s.ok()) *sink += s->size();
    if (auto a = f->GetF32Array(kv.key); a.ok()) *sink += a->size();
    if (auto a = f->GetI32Array(kv.key); a.ok()) *sink += a->size();
  }
  for (const GgufTensorInfo& t : f->tensors()) {
    const uint8_t* p = f->TensorData(t);
    *sink += p[0] + p[t.nbytes - 1];
  }
  auto m = LoadGgufModel(*f);
  if (!m.ok()) {
    ++out->files;
    EXPECT_EQ(m.status().message().find('\n'), std::string::npos) << m.status().message();
    return false;
  }
  ++out->models;
  for (const auto& [name, v] : m->tensors) {
    const uint8_t* p = static_cast<const uint8_t*>(v.data);
    for (size_t i = 0; i < v.nbytes(); i += 61) *sink += p[i];
    *sink += p[v.nbytes() - 1];
  }
  for (const std::string& t : m->tokenizer.tokens) *sink += t.size();
  return true;
}

std::vector<uint8_t> SmallModelBytes(DType t) {
  SynthSpec s;
  s.name = "fuzz";
  s.d_model = 32, s.n_layers = 2, s.n_head = 2, s.n_head_kv = 1, s.d_ff = 64, s.vocab_size = 272;
  s.ctx_len = 64;
  std::string path = testing::TempDir() + "/fuzz.gguf";
  EXPECT_TRUE(WriteRandomLlamaGguf(s, t, 5, path, nullptr).ok());
  std::string b = testing::ReadFile(path);
  return std::vector<uint8_t>(b.begin(), b.end());
}

// Offsets where one field ends and the next begins, and the offsets of integer fields that
// hold a count, a length, a type or a dimension (targets for hostile values).
struct Layout {
  std::set<uint64_t> boundaries;
  std::vector<uint64_t> u64_fields;
  std::vector<uint64_t> u32_fields;
  uint64_t data_offset = 0;
  uint64_t data_end = 0;  // end of the last tensor's bytes
};

Layout Map(const std::vector<uint8_t>& bytes) {
  Layout L;
  auto f = GgufFile::Parse("fuzz.gguf", bytes.data(), bytes.size(), nullptr);
  EXPECT_TRUE(f.ok());
  if (!f.ok()) return L;
  L.boundaries = {0, 4, 8, 16, 24};
  L.u32_fields = {4};
  L.u64_fields = {8, 16};
  uint64_t pos = 24;
  for (const GgufKv& kv : f->kvs()) {
    L.boundaries.insert(pos);
    L.u64_fields.push_back(pos);  // key length
    pos += 8 + kv.key.size();
    L.boundaries.insert(pos);
    L.u32_fields.push_back(pos);  // value type
    pos += 4;
    L.boundaries.insert(pos);
    if (kv.type == GgufType::kArray) {
      L.u32_fields.push_back(pos);      // element type
      L.u64_fields.push_back(pos + 4);  // count
      L.boundaries.insert(pos + 4);
      L.boundaries.insert(pos + 12);
      if (kv.elem_type == GgufType::kString && kv.count > 0) {
        L.u64_fields.push_back(pos + 12);  // first string's length
      }
    } else if (kv.type == GgufType::kString) {
      L.u64_fields.push_back(pos);  // string length
    }
    pos += kv.value_bytes;
  }
  for (const GgufTensorInfo& t : f->tensors()) {
    L.boundaries.insert(pos);
    L.u64_fields.push_back(pos);  // name length
    pos += 8 + t.name.size();
    L.u32_fields.push_back(pos);  // n_dims
    pos += 4;
    for (int d = 0; d < t.shape.ndim; ++d) {
      L.u64_fields.push_back(pos);  // ne[d]
      pos += 8;
    }
    L.u32_fields.push_back(pos);  // type
    pos += 4;
    L.u64_fields.push_back(pos);  // offset
    pos += 8;
    L.boundaries.insert(pos);
    L.boundaries.insert(t.offset);
    L.boundaries.insert(t.offset + t.nbytes);
    L.data_end = std::max(L.data_end, t.offset + t.nbytes);
  }
  L.data_offset = f->data_offset();
  L.boundaries.insert(pos);
  L.boundaries.insert(L.data_offset);
  L.boundaries.insert(bytes.size());
  return L;
}

// Peak resident memory in KiB. Under AddressSanitizer freed blocks stay in its quarantine
// (256 MiB by default), so there the bound on allocations comes from
// ASAN_OPTIONS=max_allocation_size_mb instead and this reports 0.
// Under AddressSanitizer freed blocks wait in its quarantine (256 MiB by default), so the peak
// says nothing about what the parser kept: the check is off there. GCC says so with
// __SANITIZE_ADDRESS__, clang with __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define WEIR_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEIR_UNDER_ASAN 1
#endif
#endif

long MaxRssKb() {
#if defined(WEIR_UNDER_ASAN)
  return 0;
#else
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
#endif
}

class GgufFuzzTest : public ::testing::TestWithParam<DType> {};

TEST_P(GgufFuzzTest, TruncationAtEveryBoundaryAndEveryHeaderByte) {
  const std::vector<uint8_t> full = SmallModelBytes(GetParam());
  ASSERT_GT(full.size(), 10000u);
  const Layout L = Map(full);
  ASSERT_GT(L.boundaries.size(), 50u);
  ASSERT_GT(L.data_end, L.data_offset);
  const long rss_before = MaxRssKb();
  uint64_t sink = 0;
  Outcome out;
  {
    Outcome o;
    ASSERT_TRUE(Exercise(full, &o, &sink));  // the untouched file is a valid model
  }
  std::set<uint64_t> lengths;
  for (uint64_t b : L.boundaries) {
    for (int64_t d = -2; d <= 2; ++d) {
      int64_t len = static_cast<int64_t>(b) + d;
      if (len >= 0 && static_cast<uint64_t>(len) < full.size())
        lengths.insert(static_cast<uint64_t>(len));
    }
  }
  for (uint64_t len = 0; len < std::min<uint64_t>(full.size(), L.data_offset + 64); ++len)
    lengths.insert(len);
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 300; ++i) lengths.insert(rng() % full.size());
  for (uint64_t len : lengths) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<int64_t>(len));
    bool model = Exercise(cut, &out, &sink);
    if (len < L.data_end) {
      EXPECT_FALSE(model) << "truncated to " << len << " of " << full.size() << " bytes";
    }
  }
  RecordProperty("cases", static_cast<int>(lengths.size()));
  RecordProperty("errors", out.errors);
  RecordProperty("models", out.models);
  EXPECT_GT(out.errors, 5000);
  EXPECT_GT(lengths.size(), 5000u);
  // Only the zero padding after the last tensor can be cut without losing data.
  EXPECT_EQ(out.models,
            static_cast<int>(std::count_if(lengths.begin(), lengths.end(),
                                           [&](uint64_t l) { return l >= L.data_end; })));
  EXPECT_LT(MaxRssKb() - rss_before, 256 * 1024) << "peak memory grew by more than 256 MiB";
  EXPECT_NE(sink, 0u);
}

TEST_P(GgufFuzzTest, MutatedBytesAndHostileFields) {
  const std::vector<uint8_t> full = SmallModelBytes(GetParam());
  const Layout L = Map(full);
  ASSERT_FALSE(L.u64_fields.empty());
  const long rss_before = MaxRssKb();
  const uint64_t size = full.size();
  const uint64_t hostile64[] = {0,
                                1,
                                2,
                                7,
                                31,
                                32,
                                33,
                                255,
                                size - 1,
                                size,
                                size + 1,
                                1ull << 31,
                                1ull << 32,
                                (1ull << 32) + 1,
                                1ull << 62,
                                1ull << 63,
                                (1ull << 63) - 1,
                                ~0ull,
                                ~0ull - 7};
  const uint32_t hostile32[] = {0,  1,  2,  3,  4,  5,           8,           9,
                                12, 13, 30, 31, 99, 0x7fffffffu, 0x80000000u, 0xffffffffu};
  std::mt19937_64 rng(20240611);
  uint64_t sink = 0;
  Outcome out;
  const int kCases = 4000;
  for (int c = 0; c < kCases; ++c) {
    std::vector<uint8_t> m = full;
    int kind = c % 4;
    if (kind == 0) {  // hostile u64 in a count / length / dimension / offset field
      uint64_t at = L.u64_fields[rng() % L.u64_fields.size()];
      uint64_t v = hostile64[rng() % std::size(hostile64)];
      if (rng() % 3 == 0) v = rng();
      std::memcpy(&m[at], &v, 8);
    } else if (kind == 1) {  // hostile u32 in a type / n_dims / version field
      uint64_t at = L.u32_fields[rng() % L.u32_fields.size()];
      uint32_t v = hostile32[rng() % std::size(hostile32)];
      std::memcpy(&m[at], &v, 4);
    } else if (kind == 2) {  // 1..4 random bytes in the header, metadata or tensor infos
      int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) m[rng() % L.data_offset] = static_cast<uint8_t>(rng());
    } else {  // a bit flip anywhere, then maybe a truncation
      uint64_t at = rng() % size;
      m[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      if (rng() % 4 == 0) m.resize(rng() % size);
    }
    Exercise(m, &out, &sink);
  }
  RecordProperty("errors", out.errors);
  RecordProperty("parsed_but_not_a_model", out.files);
  RecordProperty("models", out.models);
  EXPECT_EQ(out.errors + out.files + out.models, kCases);
  EXPECT_GT(out.errors, kCases / 4);  // most hostile fields are caught by the parser
  EXPECT_GT(out.models, 100);         // flips in weights or padding leave a valid model
  EXPECT_LT(MaxRssKb() - rss_before, 256 * 1024) << "peak memory grew by more than 256 MiB";
  EXPECT_NE(sink, 0u);
}

INSTANTIATE_TEST_SUITE_P(Types, GgufFuzzTest, ::testing::Values(DType::kF32, DType::kQ8_0),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(DTypeName(i.param));
                         });

}  // namespace
}  // namespace weir::format
