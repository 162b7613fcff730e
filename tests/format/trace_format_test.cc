// Round trip, validation and truncation tests of the sparsity trace format.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/trace_reader.h"
#include "format/trace_writer.h"
#include "testing/testing.h"

namespace weir::format {
namespace {

// 3 layers; "ffn" has 13/0/20 units (absent in layer 1), "attn" 8/8/8.
TraceHeader SmallHeader(bool events) {
  TraceHeader h;
  h.n_layers = 3;
  h.has_cache_events = events;
  h.kinds.push_back({"ffn_gate+ffn_up+ffn_down", 64, {13, 0, 20}});
  h.kinds.push_back({"attn_q", 32, {8, 8, 8}});
  return h;
}

struct Expected {
  // [token][layer][kind] -> active flags
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> masks;
  std::vector<std::vector<std::vector<CacheEvents>>> events;
};

// Writes n_tokens random tokens, alternating the three mask setters; returns what was written.
Expected WriteRandom(TraceWriter* w, int n_tokens, uint32_t seed, bool close = true) {
  const TraceHeader& h = w->header();
  std::mt19937 rng(seed);
  Expected ex;
  for (int t = 0; t < n_tokens; ++t) {
    EXPECT_TRUE(w->BeginToken().ok());
    ex.masks.emplace_back(h.n_layers);
    ex.events.emplace_back(h.n_layers);
    for (uint32_t l = 0; l < h.n_layers; ++l) {
      ex.masks[t][l].resize(h.kinds.size());
      ex.events[t][l].resize(h.kinds.size());
      for (uint32_t k = 0; k < h.kinds.size(); ++k) {
        uint32_t units = h.kinds[k].units[l];
        if (units == 0) continue;
        std::vector<uint8_t> flags(units);
        for (auto& f : flags) f = (rng() % 3 == 0);
        ex.masks[t][l][k] = flags;
        int how = (t + l + k) % 3;
        if (how == 0) {
          EXPECT_TRUE(w->SetMaskBytes(l, k, flags).ok());
        } else if (how == 1) {
          std::vector<uint32_t> idx;
          for (uint32_t u = 0; u < units; ++u) {
            if (flags[u]) idx.push_back(u);
          }
          EXPECT_TRUE(w->SetMaskIndices(l, k, idx).ok());
        } else {
          std::vector<uint8_t> bits(MaskBytes(units), 0);
          for (uint32_t u = 0; u < units; ++u) {
            if (flags[u]) bits[u / 8] |= 1 << (u % 8);
          }
          EXPECT_TRUE(w->SetMaskBits(l, k, bits).ok());
        }
        if (h.has_cache_events) {
          CacheEvents e{static_cast<uint32_t>(rng() % 100), static_cast<uint32_t>(rng() % 100),
                        static_cast<uint32_t>(rng() % 7), (uint64_t{rng()} << 20) + rng()};
          EXPECT_TRUE(w->SetEvents(l, k, e).ok());
          ex.events[t][l][k] = e;
        }
      }
    }
    EXPECT_TRUE(w->EndToken().ok());
  }
  if (close) {
    EXPECT_TRUE(w->Close().ok());
  }
  return ex;
}

void CheckAll(TraceReader* r, const Expected& ex, size_t n_tokens) {
  const TraceHeader& h = r->header();
  TraceToken tok;
  for (size_t t = 0; t < n_tokens; ++t) {
    auto more = r->Next(&tok);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    ASSERT_TRUE(*more);
    EXPECT_EQ(tok.token_index(), t);
    for (uint32_t l = 0; l < h.n_layers; ++l) {
      for (uint32_t k = 0; k < h.kinds.size(); ++k) {
        uint32_t units = h.kinds[k].units[l];
        if (units == 0) {
          EXPECT_EQ(tok.mask(l, k), nullptr);
          continue;
        }
        uint32_t count = 0;
        for (uint32_t u = 0; u < units; ++u) {
          EXPECT_EQ(tok.active(l, k, u), ex.masks[t][l][k][u] != 0) << t << " " << l << " " << u;
          count += ex.masks[t][l][k][u];
        }
        EXPECT_EQ(tok.CountActive(l, k), count);
        if (h.has_cache_events) {
          EXPECT_EQ(tok.events(l, k), ex.events[t][l][k]);
        }
      }
    }
  }
  auto end = r->Next(&tok);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);
}

TEST(TraceFormatTest, RoundTripWithAndWithoutEvents) {
  for (bool events : {false, true}) {
    std::string path = testing::TempDir() + "/t.wtrace";
    auto w = TraceWriter::Create(path, SmallHeader(events));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    Expected ex = WriteRandom(w->get(), 17, 42 + events);
    auto r = TraceReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const TraceHeader& h = (*r)->header();
    EXPECT_EQ(h.n_layers, 3u);
    EXPECT_EQ(h.n_tokens, 17u);
    EXPECT_TRUE((*r)->finished());
    ASSERT_EQ(h.kinds.size(), 2u);
    EXPECT_EQ(h.kinds[0].name, "ffn_gate+ffn_up+ffn_down");
    EXPECT_EQ(h.kinds[0].weights_per_unit, 64u);
    EXPECT_EQ(h.kinds[0].units, (std::vector<uint32_t>{13, 0, 20}));
    EXPECT_EQ(h.has_cache_events, events);
    CheckAll(r->get(), ex, 17);
    // Rewind replays the same records.
    ASSERT_TRUE((*r)->Rewind().ok());
    CheckAll(r->get(), ex, 17);
  }
}

TEST(TraceFormatTest, RecordSizeMatchesTheDocumentedLayout) {
  TraceHeader h = SmallHeader(true);
  auto layout = MakeTraceLayout(h, "x");
  ASSERT_TRUE(layout.ok());
  // 16 fixed + masks (2 + 1) + (1) + (3 + 1) bytes + 5 blocks * 20 events + 4 crc.
  EXPECT_EQ(layout->record_bytes, 16u + 8u + 100u + 4u);
  // header: 40 + kinds (2 + 24 + 8 + 12) + (2 + 6 + 8 + 12) + crc 4.
  EXPECT_EQ(layout->header_bytes, 40u + 46u + 28u + 4u);
  EXPECT_EQ(EncodeTraceHeader(h).size(), layout->header_bytes);
}

TEST(TraceFormatTest, TruncationIsAClearError) {
  std::string dir = testing::TempDir();
  std::string path = dir + "/full.wtrace";
  auto w = TraceWriter::Create(path, SmallHeader(true));
  ASSERT_TRUE(w.ok());
  WriteRandom(w->get(), 5, 7);
  std::string bytes = testing::ReadFile(path);
  auto layout = MakeTraceLayout(SmallHeader(true), "x");
  const size_t header = layout->header_bytes, record = layout->record_bytes;
  ASSERT_EQ(bytes.size(), header + 5 * record);
  // Every cut, inside the header, inside a record or at a record boundary, is refused by Open
  // with a message that names the file.
  for (size_t cut : {size_t{0}, size_t{5}, size_t{39}, header - 1, header, header + 1,
                     header + record, header + 3 * record + 10, bytes.size() - 1}) {
    std::string p = dir + "/cut.wtrace";
    testing::WriteFile(p, bytes.substr(0, cut));
    auto r = TraceReader::Open(p);
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_NE(r.status().message().find("cut.wtrace"), std::string::npos) << r.status().ToString();
    if (cut >= header) {
      EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
    }
  }
}

TEST(TraceFormatTest, FileTruncatedAfterOpenFailsInNext) {
  // Records larger than the stdio buffer, so the cut is seen by a later read.
  TraceHeader h;
  h.n_layers = 2;
  h.kinds.push_back({"ffn_up", 0, {40000, 40000}});
  std::string path = testing::TempDir() + "/t.wtrace";
  auto w = TraceWriter::Create(path, h);
  ASSERT_TRUE(w.ok());
  WriteRandom(w->get(), 4, 9);
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok());
  auto layout = MakeTraceLayout(h, "x");
  ASSERT_EQ(::truncate(path.c_str(), layout->header_bytes + 2 * layout->record_bytes + 3), 0);
  TraceToken tok;
  EXPECT_TRUE(*(*r)->Next(&tok));
  EXPECT_TRUE(*(*r)->Next(&tok));
  auto third = (*r)->Next(&tok);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("truncated: token record 2"), std::string::npos)
      << third.status().ToString();
}

TEST(TraceFormatTest, UnclosedWriterLeavesReadableCompleteRecords) {
  std::string path = testing::TempDir() + "/open.wtrace";
  Expected ex;
  {
    auto w = TraceWriter::Create(path, SmallHeader(false));
    ASSERT_TRUE(w.ok());
    ex = WriteRandom(w->get(), 6, 3, /*close=*/false);
  }  // destroyed without Close(): n_tokens stays unknown
  // Append half a record, as a crash in the middle of a write would.
  std::string bytes = testing::ReadFile(path);
  testing::WriteFile(path, bytes + std::string(9, '\x01'));
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE((*r)->finished());
  EXPECT_EQ((*r)->n_tokens(), 6u);
  EXPECT_EQ((*r)->trailing_bytes(), 9u);
  CheckAll(r->get(), ex, 6);
}

TEST(TraceFormatTest, CorruptionIsDetected) {
  std::string dir = testing::TempDir();
  std::string path = dir + "/ok.wtrace";
  auto w = TraceWriter::Create(path, SmallHeader(false));
  ASSERT_TRUE(w.ok());
  WriteRandom(w->get(), 3, 11);
  const std::string good = testing::ReadFile(path);
  auto layout = MakeTraceLayout(SmallHeader(false), "x");
  const size_t header = layout->header_bytes, record = layout->record_bytes;

  auto open_mutated = [&](size_t pos, char value) {
    std::string b = good;
    b[pos] = value;
    std::string p = dir + "/bad.wtrace";
    testing::WriteFile(p, b);
    return TraceReader::Open(p);
  };
  auto first_error = [&](size_t pos, char value) -> std::string {
    auto r = open_mutated(pos, value);
    if (!r.ok()) return r.status().ToString();
    TraceToken tok;
    while (true) {
      auto more = (*r)->Next(&tok);
      if (!more.ok()) return more.status().ToString();
      if (!*more) return "";
    }
  };
  EXPECT_NE(first_error(0, 'X').find("bad magic"), std::string::npos);
  EXPECT_NE(first_error(8, 3).find("version 3"), std::string::npos);
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // a fuzzing build accepts bad checksums
  EXPECT_NE(first_error(45, 'Z').find("header checksum"), std::string::npos);
  // A flipped mask bit inside record 1 fails its checksum.
  EXPECT_NE(first_error(header + record + 17, good[header + record + 17] ^ 0x10)
                .find("token record 1 at offset"),
            std::string::npos);
#endif
  // A hostile header_bytes is refused before allocation.
  std::string b = good;
  b[12] = b[13] = b[14] = static_cast<char>(0xFF);
  b[15] = 0x7F;
  testing::WriteFile(dir + "/huge.wtrace", b);
  auto r = TraceReader::Open(dir + "/huge.wtrace");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("header_bytes"), std::string::npos);
  EXPECT_FALSE(TraceReader::Open(dir + "/missing.wtrace").ok());
}

TEST(TraceFormatTest, GluNeuronHeaderFollowsTheConfig) {
  LlamaConfig c;
  c.d_model = 64;
  c.n_layers = 3;
  c.d_ff = 172;
  c.layers = {{4, 2, 172}, {4, 2, 100}, {4, 2, 172}};  // a structurally pruned middle layer
  TraceHeader h = GluNeuronTraceHeader(c, true);
  EXPECT_EQ(h.n_layers, 3u);
  EXPECT_TRUE(h.has_cache_events);
  ASSERT_EQ(h.kinds.size(), 1u);
  EXPECT_EQ(h.kinds[0].name, "ffn_gate+ffn_up+ffn_down");
  EXPECT_EQ(h.kinds[0].weights_per_unit, 192u);
  EXPECT_EQ(h.kinds[0].units, (std::vector<uint32_t>{172, 100, 172}));
  EXPECT_TRUE(MakeTraceLayout(h, "x").ok());
}

TEST(TraceFormatTest, WriterRejectsMisuse) {
  std::string path = testing::TempDir() + "/w.wtrace";
  TraceHeader bad = SmallHeader(false);
  bad.kinds[1].units.pop_back();
  EXPECT_FALSE(TraceWriter::Create(path, bad).ok());
  bad = SmallHeader(false);
  bad.kinds[0].name = "has space";
  EXPECT_FALSE(TraceWriter::Create(path, bad).ok());

  auto w = TraceWriter::Create(path, SmallHeader(false));
  ASSERT_TRUE(w.ok());
  TraceWriter* tw = w->get();
  std::vector<uint8_t> two(2, 0);
  EXPECT_FALSE(tw->SetMaskBits(0, 0, two).ok());  // outside a token
  ASSERT_TRUE(tw->BeginToken().ok());
  EXPECT_FALSE(tw->BeginToken().ok());
  EXPECT_FALSE(tw->SetMaskBits(1, 0, two).ok());                         // kind absent in layer 1
  EXPECT_FALSE(tw->SetMaskBits(3, 0, two).ok());                         // no layer 3
  EXPECT_FALSE(tw->SetMaskBits(0, 0, std::vector<uint8_t>(3, 0)).ok());  // wrong size
  std::vector<uint8_t> pad = {0, 0x20};  // unit 13 of 13 units: a padding bit
  EXPECT_FALSE(tw->SetMaskBits(0, 0, pad).ok());
  std::vector<uint32_t> idx = {13};
  EXPECT_FALSE(tw->SetMaskIndices(0, 0, idx).ok());
  EXPECT_FALSE(tw->SetEvents(0, 0, CacheEvents{}).ok());  // header has no events
  ASSERT_TRUE(tw->SetMaskBits(0, 0, two).ok());
  auto st = tw->EndToken();  // masks missing for other blocks
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no mask for layer 0 kind 'attn_q'"), std::string::npos)
      << st.ToString();
}

}  // namespace
}  // namespace weir::format

namespace weir::format {
namespace {

// Version 2: step sizes per record and header metadata round-trip; version 1 files (neither)
// are still read; a version 1 header with version 2 flags is refused.
TEST(TraceFormatTest, StepSizesAndMetadataRoundTrip) {
  const std::string dir = testing::TempDir();
  TraceHeader h;
  h.n_layers = 2;
  h.has_cache_events = true;
  h.has_step_tokens = true;
  h.kinds.push_back({"ffn_bundles", 0, {3, 5}});
  h.metadata = {{"trace.source", "streaming"}, {"memory.budget", "123"}, {"empty", ""}};
  const std::string path = dir + "/v2.wtrace";
  {
    auto w = TraceWriter::Create(path, h);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint32_t step : {7u, 1u, 1u}) {
      ASSERT_TRUE((*w)->BeginToken().ok());
      ASSERT_TRUE((*w)->SetStepTokens(step).ok());
      EXPECT_FALSE((*w)->SetStepTokens(0).ok());
      const uint32_t a[] = {0, 2};
      ASSERT_TRUE((*w)->SetMaskIndices(0, 0, a).ok());
      const uint32_t b[] = {4};
      ASSERT_TRUE((*w)->SetMaskIndices(1, 0, b).ok());
      ASSERT_TRUE((*w)->SetEvents(1, 0, {step, 2, 3, 4096ull * step}).ok());
      ASSERT_TRUE((*w)->EndToken().ok());
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->header().version, 2u);
  EXPECT_TRUE((*r)->header().has_step_tokens);
  ASSERT_EQ((*r)->header().metadata.size(), 3u);
  EXPECT_EQ(*(*r)->header().FindMetadata("memory.budget"), "123");
  EXPECT_EQ(*(*r)->header().FindMetadata("empty"), "");
  EXPECT_EQ((*r)->header().FindMetadata("missing"), nullptr);
  TraceToken t;
  std::vector<uint32_t> steps;
  while (*(*r)->Next(&t)) {
    steps.push_back(t.n_tokens());
    EXPECT_TRUE(t.active(0, 0, 2));
    EXPECT_FALSE(t.active(0, 0, 1));
    EXPECT_EQ(t.CountActive(1, 0), 1u);
    EXPECT_EQ(t.events(1, 0).bytes_read, 4096ull * t.n_tokens());
  }
  EXPECT_EQ(steps, (std::vector<uint32_t>{7, 1, 1}));

  // Bad metadata is refused when writing.
  TraceHeader bad = h;
  bad.metadata = {{"a=b", "c"}};
  EXPECT_FALSE(TraceWriter::Create(dir + "/bad.wtrace", bad).ok());
  bad.metadata = {{"k", "line\nbreak"}};
  EXPECT_FALSE(TraceWriter::Create(dir + "/bad.wtrace", bad).ok());
  // Version 1 cannot carry them; plain version 1 files still read, one token per record.
  TraceHeader v1 = h;
  v1.version = 1;
  EXPECT_FALSE(TraceWriter::Create(dir + "/v1bad.wtrace", v1).ok());
  v1.has_step_tokens = false;
  v1.metadata.clear();
  {
    auto w = TraceWriter::Create(dir + "/v1.wtrace", v1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->BeginToken().ok());
    EXPECT_FALSE((*w)->SetStepTokens(2).ok());
    const uint32_t a[] = {1};
    ASSERT_TRUE((*w)->SetMaskIndices(0, 0, a).ok());
    ASSERT_TRUE((*w)->SetMaskIndices(1, 0, a).ok());
    ASSERT_TRUE((*w)->EndToken().ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  auto r1 = TraceReader::Open(dir + "/v1.wtrace");
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ((*r1)->header().version, 1u);
  ASSERT_TRUE(*(*r1)->Next(&t));
  EXPECT_EQ(t.n_tokens(), 1u);
  // A version 1 header claiming the metadata flag is refused.
  std::string bytes = testing::ReadFile(dir + "/v1.wtrace");
  bytes[24] = static_cast<char>(bytes[24] | 4);
  testing::WriteFile(dir + "/v1flag.wtrace", bytes);
  auto r2 = TraceReader::Open(dir + "/v1flag.wtrace");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("flags"), std::string::npos);
  // Truncated metadata in a version 2 header is Corrupt, not a crash.
  std::string v2 = testing::ReadFile(path);
  for (size_t cut : {60u, 90u, 110u}) {
    testing::WriteFile(dir + "/cut.wtrace", v2.substr(0, cut));
    EXPECT_FALSE(TraceReader::Open(dir + "/cut.wtrace").ok());
  }
}

}  // namespace
}  // namespace weir::format
