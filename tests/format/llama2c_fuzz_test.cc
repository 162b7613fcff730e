// Truncations and random byte changes of a small llama2.c checkpoint (and its tokenizer) never
// crash the loader; whatever loads passes ValidateLlama.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "format/llama2c_reader.h"
#include "testing/testing.h"
#include "tiny_model_files.h"

namespace weir::format {
namespace {

TEST(Llama2cFuzzTest, TruncationsAndFlipsNeverCrash) {
  testdata::TinyDims d;
  d.dim = 8;
  d.hidden = 12;
  d.n_heads = 2;
  d.n_kv_heads = 1;
  d.vocab = 20;
  d.seq_len = 4;
  testdata::Expected e;
  const std::string good = testdata::MakeLlama2c(d, &e);
  const std::string tok = testdata::MakeLlama2cTokenizer(testdata::Llama2cPieces(20));
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/model.bin";
  const std::string tok_path = dir + "/tok20.bin";
  std::mt19937 rng(20240601);
  int loaded = 0, cases = 0;
  // Every truncation point of the model.
  testdata::WriteFresh(tok_path, tok);
  for (size_t cut = 0; cut < good.size(); ++cut, ++cases) {
    testdata::WriteFresh(path, good.substr(0, cut));
    auto r = LoadLlama2cModel(path);
    ASSERT_FALSE(r.ok()) << cut;
    ASSERT_FALSE(r.status().message().empty());
  }
  // Random changes, biased to the header where they matter, and to the tokenizer.
  for (int i = 0; i < 2500; ++i, ++cases) {
    std::string model = good, t = tok;
    std::string* target = i % 3 == 2 ? &t : &model;
    const size_t span = (i % 2 && target == &model) ? 28 : target->size();
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
      size_t at = rng() % span;
      if (rng() % 4 == 0 && at + 4 <= target->size()) {
        const int32_t extremes[] = {0, -1, INT32_MIN, INT32_MAX, 1 << 16, 2, 3};
        int32_t v = extremes[rng() % 7];
        std::memcpy(&(*target)[at], &v, 4);
      } else {
        (*target)[at] ^= static_cast<char>(1 + rng() % 255);
      }
    }
    if (rng() % 8 == 0) t.resize(rng() % t.size());
    testdata::WriteFresh(path, model);
    testdata::WriteFresh(tok_path, t);
    auto r = LoadLlama2cModel(path);
    if (r.ok()) {
      ++loaded;
      ASSERT_TRUE(ValidateLlama(*r).ok());
    } else {
      ASSERT_FALSE(r.status().message().empty());
    }
  }
  EXPECT_GT(cases, 3000);
  EXPECT_GT(loaded, 0);  // flips in weights or piece text still load
}

}  // namespace
}  // namespace weir::format
