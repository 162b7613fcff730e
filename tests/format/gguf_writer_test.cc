// GgufWriter -> GgufFile round trips: every metadata type (nested arrays included), every
// DType from memory and from row callbacks, alignment, determinism, atomic replacement and the
// writer's own validation.
#include "format/gguf_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/gguf_reader.h"
#include "tensor/quantize.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The bytes of a [rows, cols] tensor of type t made from random floats.
std::vector<uint8_t> EncodeRows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> f = RandomFloats(static_cast<size_t>(rows * cols), seed);
  std::vector<uint8_t> out(RowBytes(t, cols) * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(t, f.data() + r * cols, out.data() + r * RowBytes(t, cols), cols);
  }
  return out;
}

TEST(GgufWriterTest, EveryMetadataTypeRoundTrips) {
  GgufWriter w;
  w.Add("u8", GgufValue::U8(200));
  w.Add("i8", GgufValue::I8(-100));
  w.Add("u16", GgufValue::U16(60000));
  w.Add("i16", GgufValue::I16(-30000));
  w.Add("u32", GgufValue::U32(4000000000u));
  w.Add("i32", GgufValue::I32(-2000000000));
  w.Add("u64", GgufValue::U64(18000000000000000000ull));
  w.Add("i64", GgufValue::I64(-9000000000000000000ll));
  w.Add("f32", GgufValue::F32(1e-5f));
  w.Add("f64", GgufValue::F64(3.141592653589793));
  w.Add("bool_t", GgufValue::Bool(true));
  w.Add("bool_f", GgufValue::Bool(false));
  w.Add("str", GgufValue::String("h\xc3\xa9llo\nworld"));
  w.Add("empty_str", GgufValue::String(""));
  w.Add("strs", GgufValue::StringArray({"a", "", "\xe2\x96\x81the"}));
  w.Add("f32s", GgufValue::F32Array({1.5f, -2.0f, 0.25f}));
  w.Add("i32s", GgufValue::I32Array({-1, 0, 7}));
  w.Add("u32s", GgufValue::U32Array({1, 2, 4000000000u}));
  w.Add("empty_arr", GgufValue::I32Array({}));
  w.Add("bools",
        GgufValue::Array(GgufType::kBool, {GgufValue::Bool(true), GgufValue::Bool(false)}));
  w.Add("f64s", GgufValue::Array(GgufType::kFloat64, {GgufValue::F64(0.5), GgufValue::F64(-8.0)}));
  w.Add("nested",
        GgufValue::Array(GgufType::kArray, {GgufValue::I32Array({1, 2}), GgufValue::I32Array({}),
                                            GgufValue::I32Array({3})}));
  w.Add("nested_str", GgufValue::Array(GgufType::kArray, {GgufValue::StringArray({"x", "yz"})}));
  std::string path = testing::TempDir() + "/kv.gguf";
  ASSERT_TRUE(w.Write(path).ok());

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->kvs().size(), 23u);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(*f->GetU32("u8"), 200u);
  EXPECT_EQ(*f->GetI32("i8"), -100);
  EXPECT_EQ(*f->GetU32("u16"), 60000u);
  EXPECT_EQ(*f->GetI32("i16"), -30000);
  EXPECT_EQ(*f->GetU32("u32"), 4000000000u);
  EXPECT_EQ(*f->GetI32("i32"), -2000000000);
  EXPECT_EQ(*f->GetU64("u64"), 18000000000000000000ull);
  EXPECT_EQ(*f->GetI64("i64"), -9000000000000000000ll);
  EXPECT_EQ(*f->GetF32("f32"), 1e-5f);
  EXPECT_FLOAT_EQ(*f->GetF32("f64"), 3.14159265f);
  EXPECT_TRUE(*f->GetBool("bool_t"));
  EXPECT_FALSE(*f->GetBool("bool_f"));
  EXPECT_EQ(*f->GetString("str"), "h\xc3\xa9llo\nworld");
  EXPECT_EQ(*f->GetString("empty_str"), "");
  EXPECT_EQ(*f->GetStringArray("strs"), (std::vector<std::string>{"a", "", "\xe2\x96\x81the"}));
  EXPECT_EQ(*f->GetF32Array("f32s"), (std::vector<float>{1.5f, -2.0f, 0.25f}));
  EXPECT_EQ(*f->GetI32Array("i32s"), (std::vector<int32_t>{-1, 0, 7}));
  EXPECT_EQ(*f->GetI64Array("u32s"), (std::vector<int64_t>{1, 2, 4000000000ll}));
  EXPECT_TRUE(f->GetI32Array("empty_arr")->empty());
  EXPECT_EQ(*f->GetF32Array("f64s"), (std::vector<float>{0.5f, -8.0f}));
  const GgufKv* nested = f->FindKv("nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->type, GgufType::kArray);
  EXPECT_EQ(nested->elem_type, GgufType::kArray);
  EXPECT_EQ(nested->count, 3u);
  const GgufKv* bools = f->FindKv("bools");
  EXPECT_EQ(bools->elem_type, GgufType::kBool);
  EXPECT_EQ(bools->count, 2u);

  // Out-of-range and wrong-type requests are errors that name the key.
  auto neg = f->GetU32("i8");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("'i8' = -100 does not fit u32"), std::string::npos)
      << neg.status().message();
  auto big = f->GetI32("u32s");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("array of u32"), std::string::npos);
  EXPECT_FALSE(f->GetI32Array("u32s").ok());  // 4e9 does not fit i32
  EXPECT_FALSE(f->GetString("u8").ok());
  EXPECT_FALSE(f->GetBool("u8").ok());
  EXPECT_FALSE(f->GetF32("i32").ok());
  EXPECT_FALSE(f->GetStringArray("f32s").ok());
  auto missing = f->GetU32("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);

  // Rendering for `weir inspect`.
  auto r = [&](const char* k) { return f->RenderValue(*f->FindKv(k)); };
  EXPECT_EQ(r("u8"), "200");
  EXPECT_EQ(r("i64"), "-9000000000000000000");
  EXPECT_EQ(r("f32"), "1e-05");
  EXPECT_EQ(r("bool_t"), "true");
  EXPECT_EQ(r("str"), "h\xc3\xa9llo\\nworld");
  EXPECT_EQ(r("strs"), "[string x 3]");
  EXPECT_EQ(r("i32s"), "[i32 x 3: -1, 0, 7]");
  EXPECT_EQ(r("empty_arr"), "[i32 x 0]");
  EXPECT_EQ(r("nested"), "[array x 3]");
  auto all = f->RenderMetadata();
  ASSERT_EQ(all.size(), 23u);
  EXPECT_EQ(all[0].first, "u8");
  EXPECT_EQ(all.back().first, "nested_str");
}

TEST(GgufWriterTest, LongStringsAreCutWhenRendered) {
  GgufWriter w;
  w.AddString("long", std::string(1000, 'x'));
  std::string path = testing::TempDir() + "/long.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok());
  std::string s = f->RenderValue(*f->FindKv("long"));
  EXPECT_LT(s.size(), 200u);
  EXPECT_NE(s.find("(1000 bytes)"), std::string::npos);
  EXPECT_EQ(f->GetString("long")->size(), 1000u);
}

TEST(GgufWriterTest, EveryDTypeFromMemoryAndFromCallbacks) {
  struct Case {
    DType t;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {DType::kF32, {5}},
      {DType::kF32, {3, 7}},
      {DType::kF16, {4, 9}},
      {DType::kBF16, {2, 3, 5}},
      {DType::kQ8_0, {6, 64}},
      {DType::kQ4_0, {3, 96}},
      {DType::kQ8_0, {2, 2, 2, 32}},
      {DType::kQ4_0, {1, 32}},
  };
  GgufWriter w;
  std::vector<std::vector<uint8_t>> bytes;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    bytes.push_back(EncodeRows(c.t, c.shape.rows(), c.shape.cols(), static_cast<uint32_t>(i)));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    w.AddTensor("mem." + std::to_string(i), c.t, c.shape, bytes[i].data());
    const std::vector<uint8_t>* src = &bytes[i];
    size_t row_bytes = RowBytes(c.t, c.shape.cols());
    w.AddTensor("cb." + std::to_string(i), c.t, c.shape,
                [src, row_bytes](int64_t b, int64_t e, uint8_t* dst) -> Status {
                  std::memcpy(dst, src->data() + b * row_bytes, (e - b) * row_bytes);
                  return Status::Ok();
                });
  }
  std::string path = testing::TempDir() + "/tensors.gguf";
  ASSERT_TRUE(w.Write(path).ok());

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 2 * cases.size());
  EXPECT_EQ(f->data_offset() % 32, 0u);
  for (size_t i = 0; i < cases.size(); ++i) {
    for (const std::string prefix : {"mem.", "cb."}) {
      const GgufTensorInfo* t = f->FindTensor(prefix + std::to_string(i));
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->shape, cases[i].shape) << t->name;
      ASSERT_TRUE(t->dtype.has_value());
      EXPECT_EQ(*t->dtype, cases[i].t);
      EXPECT_EQ(t->ggml_type, static_cast<uint32_t>(cases[i].t));
      EXPECT_EQ(t->offset % 32, 0u);
      ASSERT_EQ(t->nbytes, bytes[i].size());
      EXPECT_EQ(std::memcmp(f->TensorData(*t), bytes[i].data(), t->nbytes), 0) << t->name;
    }
  }
  // Tensor order is the order added.
  EXPECT_EQ(f->tensors()[0].name, "mem.0");
  EXPECT_EQ(f->tensors()[1].name, "cb.0");
}

TEST(GgufWriterTest, CustomAlignmentIsWrittenAndHonoured) {
  GgufWriter w(128);
  std::vector<float> a(3, 1.0f), b(5, 2.0f);
  w.AddTensor("a", DType::kF32, {3}, a.data());
  w.AddTensor("b", DType::kF32, {5}, b.data());
  std::string path = testing::TempDir() + "/align.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(*f->GetU32("general.alignment"), 128u);
  EXPECT_EQ(f->data_offset() % 128, 0u);
  EXPECT_EQ(f->FindTensor("b")->offset % 128, 0u);
  EXPECT_EQ(f->FindTensor("b")->offset - f->FindTensor("a")->offset, 128u);
  EXPECT_EQ(f->file_size() % 128, 0u);  // the last tensor is padded too
  EXPECT_EQ(reinterpret_cast<const float*>(f->TensorData(*f->FindTensor("b")))[4], 2.0f);
}

TEST(GgufWriterTest, StreamsLargeTensorsInChunksOfRows) {
  // 2304 rows of 1024 F32 = 9 MiB: more than one 8 MiB chunk.
  const int64_t rows = 2304, cols = 1024;
  std::vector<std::pair<int64_t, int64_t>> calls;
  GgufWriter w;
  w.AddTensor("big", DType::kF32, {rows, cols}, [&](int64_t b, int64_t e, uint8_t* dst) -> Status {
    calls.emplace_back(b, e);
    float* out = reinterpret_cast<float*>(dst);
    for (int64_t r = b; r < e; ++r) {
      for (int64_t c = 0; c < cols; ++c)
        out[(r - b) * cols + c] = static_cast<float>(r * 3 + c % 7);
    }
    return Status::Ok();
  });
  std::vector<double> progress;
  std::string path = testing::TempDir() + "/big.gguf";
  ASSERT_TRUE(w.Write(path, [&](double p) { progress.push_back(p); }).ok());
  ASSERT_GE(calls.size(), 2u);
  int64_t next = 0;
  for (auto [b, e] : calls) {
    EXPECT_EQ(b, next);
    EXPECT_GT(e, b);
    EXPECT_LE(static_cast<uint64_t>(e - b) * cols * 4, 8ull << 20);
    next = e;
  }
  EXPECT_EQ(next, rows);
  ASSERT_FALSE(progress.empty());
  for (size_t i = 1; i < progress.size(); ++i) EXPECT_GE(progress[i], progress[i - 1]);
  EXPECT_EQ(progress.back(), 1.0);

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok());
  const float* d = reinterpret_cast<const float*>(f->TensorData(*f->FindTensor("big")));
  for (int64_t r : {int64_t{0}, int64_t{2047}, int64_t{2048}, rows - 1}) {
    for (int64_t c : {int64_t{0}, int64_t{6}, cols - 1}) {
      EXPECT_EQ(d[r * cols + c], static_cast<float>(r * 3 + c % 7));
    }
  }
}

TEST(GgufWriterTest, SameInputsGiveIdenticalBytes) {
  std::vector<uint8_t> q = EncodeRows(DType::kQ8_0, 4, 64, 7);
  auto build = [&](const std::string& path) {
    GgufWriter w;
    w.AddString("general.architecture", "llama");
    w.Add("x", GgufValue::F32Array({1, 2, 3}));
    w.AddTensor("q", DType::kQ8_0, {4, 64}, q.data());
    w.AddTensor("z", DType::kF16, {3, 5}, [](int64_t b, int64_t e, uint8_t* dst) -> Status {
      for (int64_t i = 0; i < (e - b) * 5 * 2; ++i) dst[i] = static_cast<uint8_t>(b + i);
      return Status::Ok();
    });
    return w.Write(path);
  };
  std::string dir = testing::TempDir();
  ASSERT_TRUE(build(dir + "/a.gguf").ok());
  ASSERT_TRUE(build(dir + "/b.gguf").ok());
  std::string a = testing::ReadFile(dir + "/a.gguf");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, testing::ReadFile(dir + "/b.gguf"));
}

TEST(GgufWriterTest, FailedWriteLeavesTargetUntouchedAndNoTempFile) {
  std::string dir = testing::TempDir();
  std::string path = dir + "/model.gguf";
  testing::WriteFile(path, "previous contents");
  GgufWriter w;
  w.AddString("k", "v");
  w.AddTensor("t", DType::kF32, {100, 4}, [](int64_t b, int64_t, uint8_t*) -> Status {
    if (b > 0) return Status::IoError("source went away");
    return Status::Ok();
  });
  w.AddTensor("u", DType::kF32, {4}, [](int64_t, int64_t, uint8_t*) -> Status {
    return Status::Internal("generator failed");
  });
  Status st = w.Write(path);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("generator failed"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tensor u"), std::string::npos) << st.message();
  EXPECT_EQ(testing::ReadFile(path), "previous contents");
  EXPECT_FALSE(testing::FileExists(path + ".tmp"));

  // An unwritable directory is an I/O error, not a crash.
  GgufWriter ok;
  ok.AddString("k", "v");
  Status st2 = ok.Write(dir + "/no/such/dir/model.gguf");
  EXPECT_EQ(st2.code(), Status::Code::kIoError) << st2.ToString();
}

TEST(GgufWriterTest, RejectsInvalidInput) {
  std::vector<float> data(64, 0.0f);
  auto fails = [&](const std::function<void(GgufWriter*)>& build, const std::string& expect) {
    GgufWriter w;
    build(&w);
    std::string path = testing::TempDir() + "/bad.gguf";
    Status st = w.Write(path);
    EXPECT_FALSE(st.ok()) << expect;
    EXPECT_NE(st.message().find(expect), std::string::npos) << st.message();
    EXPECT_FALSE(testing::FileExists(path));
  };
  fails(
      [](GgufWriter* w) {
        w->AddU32("a", 1);
        w->AddU32("a", 2);
      },
      "'a' added twice");
  fails([](GgufWriter* w) { w->AddU32("", 1); }, "empty metadata key");
  fails([](GgufWriter* w) { w->AddU32("general.alignment", 64); }, "general.alignment");
  fails(
      [](GgufWriter* w) {
        w->Add("m", GgufValue::Array(GgufType::kInt32, {GgufValue::I32(1), GgufValue::F32(2)}));
      },
      "f32 element at index 1");
  fails(
      [&](GgufWriter* w) {
        w->AddTensor("t", DType::kF32, {4}, data.data());
        w->AddTensor("t", DType::kF32, {4}, data.data());
      },
      "'t' added twice");
  fails([&](GgufWriter* w) { w->AddTensor(std::string(64, 'n'), DType::kF32, {4}, data.data()); },
        "64 bytes");
  fails(
      [&](GgufWriter* w) {
        w->AddTensor("z", DType::kF32, {0, 4}, data.data());
      },
      "invalid shape");
  fails([&](GgufWriter* w) { w->AddTensor("s", DType::kF32, Shape(), data.data()); },
        "0 dimensions");
  fails(
      [&](GgufWriter* w) {
        w->AddTensor("q", DType::kQ8_0, {2, 48}, data.data());
      },
      "row length 48 is not a multiple of the Q8_0 block size 32");
  fails(
      [&](GgufWriter* w) {
        w->AddTensor("n", DType::kF32, {4}, static_cast<const void*>(nullptr));
      },
      "neither data nor a row filler");
  GgufWriter odd(48);
  EXPECT_FALSE(odd.Write(testing::TempDir() + "/x.gguf").ok());
}

}  // namespace
}  // namespace weir::format
