// `weir run --draft` as a user runs it: every draft kind prints the plain run's greedy text, on
// SmolLM2 (when shared/ has it) and on a generated model's pack streamed just above its minimum
// (a draft model's memory counted inside the budget);
// and what it cannot take is a one-line error with the usage (2) or runtime (1) exit code, with
// nothing printed as text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace weir {
namespace {

std::string Smol() {
  return testing::SharedPath("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
}

nlohmann::json ParseOut(const testing::CommandResult& r) { return nlohmann::json::parse(r.out, nullptr, false); }

TEST(SpeculativeCliTest, EveryDraftPrintsThePlainGreedyText) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  if (!testing::FileExists(Smol())) GTEST_SKIP() << Smol() << " is absent";
  const std::string run = w + " run -m " + Smol() +
                          " -p 'The capital of France is Paris. The capital of Italy is' -n 40 --temp 0 --json";
  auto plain = testing::RunCommand(run);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::string want = ParseOut(plain).value("text", std::string());
  ASSERT_FALSE(want.empty());
  for (const std::string& draft : std::vector<std::string>{"--draft ngram", "--draft ngram:1 --draft-max 4 --draft-fixed",
                                  "--draft self", "--draft self:dip:0.75", "--draft ngram --draft " + Smol()}) {
    SCOPED_TRACE(draft);
    auto r = testing::RunCommand(run + " " + draft);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = ParseOut(r);
    EXPECT_EQ(j.value("text", std::string()), want);
    const nlohmann::json& sp = j["speculative"];
    ASSERT_TRUE(sp.is_object()) << r.out;
    EXPECT_LE(sp["accepted"].get<uint64_t>(), sp["drafted"].get<uint64_t>());
    EXPECT_GE(sp["tokens_per_pass"].get<double>(), 1.0);
  }
}

// weir chat keeps the KV cache across turns; with a draft the cache holds every token but the
// last sampled one, and the next turn reuses the tokens it shares.
TEST(SpeculativeCliTest, ChatTurnsAreThePlainReplies) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  if (!testing::FileExists(Smol())) GTEST_SKIP() << Smol() << " is absent";
  const std::string dir = testing::TempDir();
  testing::WriteFile(dir + "/turns.txt", "Name three colors.\nRepeat them in reverse order.\nAnd once more.\n");
  const std::string chat = w + " chat -m " + Smol() + " --temp 0 -n 40 --json < " + dir + "/turns.txt";
  auto plain = testing::RunCommand(chat);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto replies = [](const std::string& out) {
    std::vector<std::string> r;
    size_t at = 0;
    while (at < out.size()) {
      const size_t end = out.find('\n', at);
      const std::string line = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
      at = end == std::string::npos ? out.size() : end + 1;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object()) r.push_back(j.value("reply", std::string()));
    }
    return r;
  };
  const std::vector<std::string> want = replies(plain.out);
  ASSERT_EQ(want.size(), 3u) << plain.out;
  auto spec = testing::RunCommand(chat + " --draft ngram --draft " + Smol());
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(replies(spec.out), want);
}

TEST(SpeculativeCliTest, StreamedPackJustAboveItsMinimum) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  const std::string dir = testing::TempDir();
  const std::string gguf = dir + "/spec.gguf", pack = dir + "/spec.weir";
  auto g = testing::RunCommand(w + " gen --arch gemma3 --preset tiny --type q8_0 --seed 5 -o " + gguf);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  auto p = testing::RunCommand(w + " pack -m " + gguf + " -o " + pack + " --no-progress");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const uint64_t minimum = testing::WeirMinimumBudget(pack);
  ASSERT_GT(minimum, 0u);
  const std::string run = w + " run -m " + pack + " -p 'a b c a b c a b' -n 24 -c 64 --temp 0 --json" +
                          " --memory-scope weights --block 4KiB --prefetch -1 --memory " +
                          std::to_string(minimum + (16u << 10));
  auto plain = testing::RunCommand(run);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto spec = testing::RunCommand(run + " --draft ngram:2");
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(ParseOut(spec).value("text", std::string()), ParseOut(plain).value("text", std::string()));
  EXPECT_GT(ParseOut(spec)["streaming"]["total"]["storage_bytes"].get<uint64_t>(), 0u);
  // A draft model's memory counts inside the budget: at the pack's own minimum it does not fit,
  // with 16 MiB more it does, and the text is the same.
  auto over = testing::RunCommand(run + " --draft " + gguf);
  EXPECT_EQ(over.exit_code, 1) << over.err;
  EXPECT_NE(over.err.find("minimum"), std::string::npos) << over.err;
  auto roomy = testing::RunCommand(w + " run -m " + pack + " -p 'a b c a b c a b' -n 24 -c 64 --temp 0 --json" +
                                   " --memory-scope weights --block 4KiB --prefetch -1 --memory " +
                                   std::to_string(minimum + (16u << 20)) + " --draft " + gguf);
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  EXPECT_EQ(ParseOut(roomy).value("text", std::string()), ParseOut(plain).value("text", std::string()));
}

TEST(SpeculativeCliTest, BadDraftsAreOneLineErrors) {
  const std::string w = testing::WeirBin();
  if (!testing::FileExists(w)) GTEST_SKIP() << "weir binary not built";
  const std::string dir = testing::TempDir();
  const std::string a = dir + "/a.gguf", b = dir + "/b.gguf";
  ASSERT_EQ(testing::RunCommand(w + " gen --preset tiny --seed 1 -o " + a).exit_code, 0);
  // Another vocabulary: SmolLM2 when present, else a generated model with a larger one.
  std::string other = Smol();
  if (!testing::FileExists(other)) {
    ASSERT_EQ(testing::RunCommand(w + " gen --dims 64,2,4,2,128,777 --seed 2 -o " + b).exit_code, 0);
    other = b;
  }
  const std::string run = w + " run -m " + a + " -p hello -n 4 --temp 0";
  struct Case {
    std::string flags;
    int exit_code;
    std::string says;
  };
  for (const Case& c : {Case{"--draft-max 0 --draft ngram", 2, "draft-max"},
                        Case{"--draft ngram:99", 2, "1 to 16"},
                        Case{"--draft mtp", 2, "multi-token"},
                        Case{"--draft ngram --draft-min 9 --draft-max 4", 2, "draft-min"},
                        Case{"--draft " + dir + "/missing.gguf", 1, "missing.gguf"},
                        Case{"--draft " + other, 1, "vocabulary"}}) {
    SCOPED_TRACE(c.flags);
    auto r = testing::RunCommand(run + " " + c.flags);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty() || r.out == "hello") << r.out;
  }
  // weir bench measures a draft on real text only.
  auto bench = testing::RunCommand(w + " bench -m " + a + " -n 4 -r 1 --no-stream --draft ngram");
  EXPECT_EQ(bench.exit_code, 2) << bench.err;
  EXPECT_NE(bench.err.find("--prompt-file"), std::string::npos) << bench.err;
}

}  // namespace
}  // namespace weir
