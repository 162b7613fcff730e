// The KV cache types from the command line: -ctk / -ctv (llama.cpp's spellings) and the long
// flags, the cache's bytes in --json, one-line errors for a type that does not exist or cannot
// hold the heads, and a pack's budget that counts the cache at its type (a long context that
// does not fit in F16 fits in Q4_0).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/testing.h"

namespace weir {
namespace {

nlohmann::json KvOut(const testing::CommandResult& r) {
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

TEST(KvCacheCliTest, TypesBytesAndErrors) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  const std::string gguf = testing::TempDir() + "/kv.gguf";
  ASSERT_EQ(testing::RunCommand(w + " gen --arch gemma3 --preset tiny --seed 3 -o " + gguf).exit_code, 0);
  const std::string run = w + " run -m " + gguf + " -p 'a b c' -n 8 -c 256 --temp 0 --json";
  auto f16 = testing::RunCommand(run);
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  EXPECT_EQ(KvOut(f16)["kv_cache"]["types"], "f16");  // the default, as llama.cpp's
  auto f32 = testing::RunCommand(run + " --cache-type-k f32 --cache-type-v f32");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_EQ(KvOut(f32)["kv_cache"]["types"], "f32");
  EXPECT_EQ(KvOut(f32)["kv_cache"]["bytes"].get<uint64_t>(), 2 * KvOut(f16)["kv_cache"]["bytes"].get<uint64_t>());
  auto mixed = testing::RunCommand(run + " -ctk q8_0 -ctv q4_0");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  EXPECT_EQ(KvOut(mixed)["kv_cache"]["types"], "q8_0/q4_0");
  EXPECT_LT(KvOut(mixed)["kv_cache"]["bytes"].get<uint64_t>(), KvOut(f16)["kv_cache"]["bytes"].get<uint64_t>());
  EXPECT_EQ(KvOut(mixed)["generated_tokens"], 8);

  auto unknown = testing::RunCommand(run + " -ctk q9_9");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("unknown type 'q9_9'"), std::string::npos) << unknown.err;
  auto too_big = testing::RunCommand(run + " -ctv q4_K");  // blocks of 256 values, heads of 32
  EXPECT_EQ(too_big.exit_code, 1) << too_big.err;
  EXPECT_NE(too_big.err.find("head dimension 32"), std::string::npos) << too_big.err;
  EXPECT_TRUE(too_big.out.empty()) << too_big.out;
}

TEST(KvCacheCliTest, APacksBudgetCountsTheCacheAtItsType) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  const std::string dir = testing::TempDir();
  const std::string gguf = dir + "/kvp.gguf", pack = dir + "/kvp.weir";
  ASSERT_EQ(testing::RunCommand(w + " gen --arch gemma3 --preset tiny --type q8_0 --seed 4 -o " + gguf).exit_code, 0);
  ASSERT_EQ(testing::RunCommand(w + " pack -m " + gguf + " -o " + pack + " --no-progress").exit_code, 0);
  const uint64_t minimum = testing::WeirMinimumBudget(pack);  // at -c 64, F16
  ASSERT_GT(minimum, 0u);
  // 32768 tokens: the one global layer's keys and values are 4 MiB in F16, 1.1 MiB in Q4_0.
  const std::string run = w + " run -m " + pack + " -p 'a b c' -n 4 -c 32768 --temp 0 --json" +
                          " --memory-scope weights --block 4KiB --prefetch -1 --memory " +
                          std::to_string(minimum + (3u << 20));
  auto f16 = testing::RunCommand(run);
  EXPECT_EQ(f16.exit_code, 1) << f16.err;
  EXPECT_NE(f16.err.find("KV cache of 32768 tokens in f16"), std::string::npos) << f16.err;
  EXPECT_NE(f16.err.find("-ctk q8_0"), std::string::npos) << f16.err;
  auto q4 = testing::RunCommand(run + " -ctk q4_0 -ctv q4_0");
  ASSERT_EQ(q4.exit_code, 0) << q4.err;
  const nlohmann::json kv = KvOut(q4)["kv_cache"];
  EXPECT_EQ(kv["types"], "q4_0");
  // The budget's answer to "how long a context": more tokens in Q4_0 than in F16, at least this one.
  EXPECT_GE(kv["max_ctx"]["q4_0"].get<int64_t>(), 32768);
  EXPECT_GT(kv["max_ctx"]["q4_0"].get<int64_t>(), kv["max_ctx"]["f16"].get<int64_t>());
  EXPECT_LT(kv["max_ctx"]["f16"].get<int64_t>(), 32768);
}

}  // namespace
}  // namespace weir
