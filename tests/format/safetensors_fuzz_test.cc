// Truncations and random byte changes of a small safetensors model (header and data) and of its
// config.json never crash the loader; whatever loads passes ValidateLlama.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "format/safetensors_reader.h"
#include "testing/testing.h"
#include "tiny_model_files.h"

namespace weir::format {
namespace {

TEST(SafetensorsFuzzTest, TruncationsAndFlipsNeverCrash) {
  testdata::TinyDims d;
  d.dim = 8;
  d.hidden = 12;
  d.n_heads = 2;
  d.n_kv_heads = 1;
  d.vocab = 16;
  d.n_layers = 1;
  testdata::Expected e;
  const std::string good =
      testdata::MakeSafetensors(testdata::HfLlamaTensors(d, false, true, &e),
                                {{"model.embed_tokens.weight", "lm_head.weight"}});
  const std::string config = testdata::HfConfig(d, true).dump(1);
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/model.safetensors";
  testdata::WriteFresh(dir + "/config.json", config);
  uint64_t json_bytes;
  std::memcpy(&json_bytes, good.data(), 8);

  int loaded = 0, cases = 0;
  // Truncations: every point in the header, then every 13th byte of the data.
  for (size_t cut = 0; cut < good.size(); cut += cut < 8 + json_bytes ? 1 : 13, ++cases) {
    testdata::WriteFresh(path, good.substr(0, cut));
    auto r = LoadSafetensorsModel(path);
    ASSERT_FALSE(r.ok()) << cut;
    ASSERT_FALSE(r.status().message().empty());
  }
  std::mt19937 rng(4242);
  for (int i = 0; i < 2500; ++i, ++cases) {
    std::string st = good, cfg = config;
    std::string* target = i % 4 == 3 ? &cfg : &st;
    // Mostly the JSON header (where parsing happens), sometimes anywhere.
    const size_t span = target == &st && i % 2 ? 8 + json_bytes : target->size();
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
      const size_t at = rng() % span;
      switch (rng() % 4) {
        case 0:  // a digit changed: offsets and shapes shift
          (*target)[at] = static_cast<char>('0' + rng() % 10);
          break;
        case 1:  // structural characters
          (*target)[at] = "{}[],:\" "[rng() % 8];
          break;
        case 2:
          (*target)[at] ^= static_cast<char>(1 + rng() % 255);
          break;
        default:  // the length field
          if (target == &st) {
            uint64_t n = json_bytes + (rng() % 33) - 16;
            if (rng() % 5 == 0) n = rng() % 2 ? ~0ull : (1ull << 40);
            std::memcpy(&st[0], &n, 8);
          }
      }
    }
    testdata::WriteFresh(path, st);
    testdata::WriteFresh(dir + "/config.json", cfg);
    auto r = LoadSafetensorsModel(path);
    if (r.ok()) {
      ++loaded;
      ASSERT_TRUE(ValidateLlama(*r).ok());
    } else {
      ASSERT_FALSE(r.status().message().empty());
    }
  }
  EXPECT_GT(cases, 3000);
  EXPECT_GT(loaded, 0);  // flips in the data or harmless header spaces still load
}

}  // namespace
}  // namespace weir::format
