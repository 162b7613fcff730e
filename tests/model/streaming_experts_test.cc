// A mixture of experts packed with the experts layout and streamed: its logits equal the
// resident pack's bit for bit at every budget and policy, and the source GGUF's within the
// products' rounding; an expert is one read; the prediction of the next layer's experts is
// counted; I/O errors come back as errors.
#include <gtest/gtest.h>

#include <cmath>

#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "model/model.h"
#include "model/sampler.h"
#include "sparsity/calibration.h"
#include "model/streaming_model.h"
#include "model/streaming_test_util.h"
#include "storage/fault_injecting_device.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

using streaming_test::Config;
using streaming_test::Generate;
using streaming_test::Memory;
using streaming_test::Run;
using streaming_test::RunPack;
using streaming_test::Same;
using streaming_test::Trace;

struct Files {
  std::string gguf, pack;
};

Files MakeFiles(const std::string& arch, DType type) {
  Files f;
  const std::string dir = testing::TempDir();
  auto spec = format::SynthPreset("tiny", arch);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  f.gguf = dir + "/" + arch + ".gguf";
  EXPECT_TRUE(format::WriteRandomLlamaGguf(*spec, type, 5, f.gguf, nullptr).ok());
  auto m = format::LoadModel(f.gguf);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  f.pack = dir + "/" + arch + ".weir";
  format::PackOptions o;
  o.layout = format::PackLayout::kExperts;
  Status st = format::WritePack(*m, f.pack, o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return f;
}

TEST(StreamingExpertsTest, PackLaysEachExpertOutAsOnePageAlignedRecord) {
  const Files f = MakeFiles("qwen3moe", DType::kQ8_0);
  auto pack = format::PackFile::Open(f.pack);
  ASSERT_TRUE(pack.ok()) << pack.status().ToString();
  EXPECT_EQ(pack->layout(), format::PackLayout::kExperts);
  auto src = format::LoadModel(f.gguf);
  ASSERT_TRUE(src.ok());
  const auto bytes = testing::ReadFile(f.pack);
  for (const format::PackGroup& g : pack->groups()) {
    EXPECT_EQ(g.expert_stride % 4096, 0u);
    EXPECT_EQ(g.offset % 4096, 0u);
    EXPECT_EQ(g.nbytes, g.expert_stride * static_cast<uint64_t>(g.n_expert));
    const char* stacks[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int p = 0; p < 3; ++p) {
      const TensorView* s = src->Find(StrFormat("blk.%d.%s.weight", g.first_layer, stacks[p]));
      ASSERT_NE(s, nullptr);
      const size_t part = s->nbytes() / static_cast<size_t>(g.n_expert);
      for (int e = 0; e < g.n_expert; ++e) {
        const uint8_t* want = static_cast<const uint8_t*>(s->data) + static_cast<size_t>(e) * part;
        const uint8_t* got = reinterpret_cast<const uint8_t*>(bytes.data()) + g.offset +
                             static_cast<size_t>(e) * g.expert_stride + g.expert_part[p];
        ASSERT_EQ(std::memcmp(want, got, part), 0) << "layer " << g.first_layer << " expert " << e;
      }
    }
  }
  // The router and the attention are static tensors.
  EXPECT_NE(pack->FindStatic("blk.0.ffn_gate_inp.weight"), nullptr);
  EXPECT_NE(pack->FindStatic("blk.1.attn_q.weight"), nullptr);
}

TEST(StreamingExpertsTest, StreamedEqualsResidentAtEveryBudgetAndIsCloseToTheGguf) {
  ThreadPool pool(2);
  const int steps = 6;
  for (const char* arch : {"qwen3moe", "mixtral"}) {
    for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
      SCOPED_TRACE(std::string(arch) + " " + DTypeName(type));
      const Files f = MakeFiles(arch, type);
      auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, steps);
      ASSERT_TRUE(resident.ok()) << resident.status().ToString();
      // The GGUF session: the same expert bytes (tiled in memory for Q8_0/Q4_0, so the sums run
      // in another order).
      auto file = format::LoadModel(f.gguf);
      ASSERT_TRUE(file.ok());
      auto model = Model::FromFile(std::move(file).value());
      ASSERT_TRUE(model.ok());
      auto gguf = Generate(**model, nullptr, nullptr, &pool, steps);
      ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
      double err = 0, ref = 0;
      for (size_t i = 0; i < gguf->logits.size(); ++i) {
        err = std::max<double>(err, std::fabs(gguf->logits[i] - resident->trace.logits[i]));
        ref = std::max<double>(ref, std::fabs(gguf->logits[i]));
      }
      EXPECT_LT(err / ref, type == DType::kF32 ? 1e-5 : 0.02);
      const uint64_t streamed = resident->plan.streamed_bytes;
      for (const char* policy : {"lru", "lfu", "mru"}) {
        auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, policy), &pool, 0);
        ASSERT_TRUE(probe.ok()) << probe.status().ToString();
        const uint64_t minimum = probe->plan.minimum();
        for (uint64_t budget : {minimum, minimum + streamed / 4, minimum + streamed / 2}) {
          SCOPED_TRACE(std::string(policy) + " budget " + std::to_string(budget));
          auto got = RunPack(f.pack, Memory(f.pack), Config(budget, policy), &pool, steps);
          ASSERT_TRUE(got.ok()) << got.status().ToString();
          EXPECT_TRUE(Same(got->trace, resident->trace));
          EXPECT_GT(got->stats.storage_bytes, 0u);
        }
      }
    }
  }
}

TEST(StreamingExpertsTest, AnExpertIsOneReadAndPredictionsAreCounted) {
  ThreadPool pool(2);
  const Files f = MakeFiles("qwen3moe", DType::kQ8_0);
  auto pack = format::PackFile::Open(f.pack);
  ASSERT_TRUE(pack.ok());
  const uint64_t stride = pack->groups()[0].expert_stride;
  StreamingConfig c = Config(UINT64_MAX, "lru");
  c.stream.stream_attention = false;
  auto probe = RunPack(f.pack, Memory(f.pack), c, &pool, 0);
  ASSERT_TRUE(probe.ok());
  // Nothing cached beyond the minimum: every chosen expert is read, in whole records.
  c.memory_budget = probe->plan.minimum();
  auto got = RunPack(f.pack, Memory(f.pack), c, &pool, 8);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->stats.storage_bytes % stride, 0u);
  EXPECT_GT(got->stats.storage_bytes, 0u);
  // Decode steps predict the next layer's experts (layer 1 from layer 0): counted, with a recall
  // between 0 and 1.
  EXPECT_GT(got->stats.experts_predicted, 0u);
  EXPECT_LE(got->stats.experts_predicted_used, got->stats.experts_chosen_predicted);
  EXPECT_GT(got->stats.expert_uses, 0u);
  EXPECT_LE(got->stats.expert_hits, got->stats.expert_uses);
  // Without read-ahead nothing is predicted.
  c.stream.prefetch_layers = -1;
  auto none = RunPack(f.pack, Memory(f.pack), c, &pool, 8);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->stats.experts_predicted, 0u);
  EXPECT_TRUE(Same(none->trace, got->trace));
}

// Staging holds a layer's chosen experts as the cache charges them (payload plus the entry's
// header, index and policy bytes), so with a small cache every expert that is not cached goes to
// the I/O thread: it reads the second while the first is computed. Sized by payload bytes alone,
// staging held one expert of two and the other was read on the compute thread.
TEST(StreamingExpertsTest, StagingHoldsTheChosenExpertsAsCharged) {
  ThreadPool pool(2);
  const Files f = MakeFiles("mixtral", DType::kQ8_0);
  auto pack = format::PackFile::Open(f.pack);
  ASSERT_TRUE(pack.ok());
  ASSERT_EQ(pack->config().n_expert_used, 2);
  const uint64_t stride = pack->groups()[0].expert_stride;
  StreamingConfig c = Config(UINT64_MAX, "lfu");
  c.stream.stream_attention = false;
  c.stream.prefetch_layers = 0;  // an experts pack's default: nothing predicted is read
  auto probe = RunPack(f.pack, Memory(f.pack), c, &pool, 0);
  ASSERT_TRUE(probe.ok());
  // A cache of four experts: a quarter of it is below two experts, so staging is its floor.
  c.memory_budget = probe->plan.minimum() + 4 * stride;
  // The decode steps' reads: eight steps less the prompt's (a prompt chooses more experts per
  // layer than staging holds; the rest are read on demand, as they should be).
  auto prompt = RunPack(f.pack, Memory(f.pack), c, &pool, 0);
  auto got = RunPack(f.pack, Memory(f.pack), c, &pool, 8);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GE(got->plan.staging_bytes, 2 * stride);
  EXPECT_LT(got->plan.staging_bytes, 3 * stride);
  const uint64_t read = got->stats.storage_bytes - prompt->stats.storage_bytes;
  const uint64_t ahead = got->stats.prefetched_bytes - prompt->stats.prefetched_bytes;
  EXPECT_GE(read, 8 * stride);  // nothing is cached: every decode step reads
  EXPECT_EQ(ahead, read);
  EXPECT_EQ(got->stats.transient_bytes, 0u);
}

// Experts at places rounded up to whole 2 MiB (StreamingOptions::huge_expert_places_from; here
// every expert, however small): the logits stay those of the resident run, and an expert smaller
// than a huge page is charged its record alone (its place gets small pages), as with plain places.
TEST(StreamingExpertsTest, ExpertsAtHugePagePlacesEqualTheResidentRun) {
  ThreadPool pool(2);
  for (const char* arch : {"mixtral", "qwen3moe"}) {
    SCOPED_TRACE(arch);
    const Files f = MakeFiles(arch, DType::kQ4_0);
    auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), &pool, 6);
    ASSERT_TRUE(resident.ok()) << resident.status().ToString();
    StreamingConfig c = Config(UINT64_MAX, "lfu");
    c.stream.huge_expert_places_from = 4096;
    auto probe = RunPack(f.pack, Memory(f.pack), c, &pool, 0);
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    auto plain = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), &pool, 0);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(probe->plan.streamer_bytes, plain->plan.streamer_bytes);
    const uint64_t minimum = probe->plan.minimum();
    for (uint64_t budget : {minimum, minimum + probe->plan.streamed_bytes / 4}) {
      SCOPED_TRACE(budget);
      c.memory_budget = budget;
      auto got = RunPack(f.pack, Memory(f.pack), c, &pool, 6);  // checks the cache's budget
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(Same(got->trace, resident->trace));
      EXPECT_GT(got->stats.storage_bytes, 0u);
    }
  }
}

TEST(StreamingExpertsTest, ReadFailureIsAnErrorNotWrongTokens) {
  ThreadPool pool(2);
  const Files f = MakeFiles("mixtral", DType::kQ8_0);
  auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, 6);
  ASSERT_TRUE(resident.ok());
  bool failed = false;
  for (uint64_t after : {0, 5, 40, 200}) {
    SCOPED_TRACE(after);
    storage::FaultOptions fo;
    fo.fail_after_reads = after;
    auto dev = std::make_unique<storage::FaultInjectingDevice>(Memory(f.pack), fo);
    auto got = RunPack(f.pack, std::move(dev), Config(resident->plan.minimum(), "lru"), &pool, 6);
    if (got.ok()) {
      EXPECT_TRUE(Same(got->trace, resident->trace));
    } else {
      failed = true;
      EXPECT_EQ(got.status().code(), Status::Code::kIoError) << got.status().ToString();
    }
  }
  EXPECT_TRUE(failed);
}

// --- routing bias toward cached experts -------------------------------------------------------

// An ExpertSource in front of another: it logs every cache state the MoE MLP reads (recording),
// or answers with a logged sequence instead (replaying); everything else goes to `inner`.
class CacheStateLog final : public ExpertSource {
 public:
  CacheStateLog(ExpertSource* inner, int n_expert, const std::vector<std::vector<uint64_t>>* replay)
      : inner_(inner), words_(static_cast<size_t>((n_expert + 63) / 64)), replay_(replay) {
    all_.assign(words_, 0);
    for (int e = 0; e < n_expert; ++e) all_[static_cast<size_t>(e / 64)] |= uint64_t{1} << (e % 64);
  }
  Status Prepare(int layer, std::span<const int32_t> experts) override {
    return inner_->Prepare(layer, experts);
  }
  Result<ExpertWeights> Acquire(int layer, int e) override { return inner_->Acquire(layer, e); }
  void Release(int layer, int e) override { inner_->Release(layer, e); }
  bool predicts() const override { return inner_->predicts(); }
  void Predict(int layer, std::span<const int32_t> experts) override {
    inner_->Predict(layer, experts);
  }
  const uint64_t* CachedExperts(int layer) override {
    if (replay_ != nullptr) {
      EXPECT_LT(next_, replay_->size()) << "more steps than were recorded";
      if (next_ >= replay_->size()) return all_.data();
      return (*replay_)[next_++].data();
    }
    const uint64_t* m = inner_->CachedExperts(layer);
    log.push_back(m ? std::vector<uint64_t>(m, m + words_) : all_);
    return m;
  }
  std::vector<std::vector<uint64_t>> log;
  size_t replayed() const { return next_; }

 private:
  ExpertSource* inner_;
  size_t words_;
  std::vector<uint64_t> all_;
  const std::vector<std::vector<uint64_t>>* replay_;
  size_t next_ = 0;
};

struct BiasedRun {
  Trace trace;
  std::vector<std::vector<uint64_t>> log;
  size_t replayed = 0;
  MoeMlp::BiasStats bias;
  StreamStats stats;
  int n_layers = 0;
};

// Greedy decoding as streaming_test::Generate (a 5-token prompt in two calls, then `steps`
// tokens) with the routing bias `gamma`, the experts taken through a CacheStateLog.
Result<BiasedRun> RunBiased(const std::string& pack, const StreamingConfig& c, float gamma,
                            const std::vector<std::vector<uint64_t>>* replay, ThreadPool* pool,
                            int steps) {
  WEIR_ASSIGN_OR_RETURN(auto sm, StreamingModel::Open(pack, Memory(pack), c));
  SessionOptions so = streaming_test::SessionFor(&sm->streamer());
  so.expert_bias = gamma;
  {
    WEIR_ASSIGN_OR_RETURN(auto probe, Session::Create(sm->model(), pool, so));
    WEIR_RETURN_IF_ERROR(sm->Fit(probe->allocated_bytes()));
  }
  CacheStateLog source(sm->streamer().experts(), sm->model().config().n_expert, replay);
  so.experts = &source;
  WEIR_ASSIGN_OR_RETURN(auto s, Session::Create(sm->model(), pool, so));
  const int vocab = sm->model().config().vocab_size;
  std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
  BiasedRun r;
  WEIR_ASSIGN_OR_RETURN(const float* l, s->Prefill(prompt));
  for (int i = 0; i < steps; ++i) {
    r.trace.logits.insert(r.trace.logits.end(), l, l + vocab);
    const int32_t tok = Sampler::Argmax(l, vocab);
    r.trace.tokens.push_back(tok);
    WEIR_ASSIGN_OR_RETURN(l, s->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast));
  }
  r.trace.logits.insert(r.trace.logits.end(), l, l + vocab);
  r.log = std::move(source.log);
  r.replayed = source.replayed();
  r.bias = s->moe()->bias_stats();
  r.stats = sm->streamer().stats();
  r.n_layers = sm->model().config().n_layers;
  return r;
}

// The bias makes a streamed run's routing depend on its cache, so a streamed run is compared
// with the resident pack routed by the same cache states: the states the streamed run read,
// replayed step by step. Bit for bit, and the bias must have moved some choices.
TEST(StreamingExpertsTest, BiasedStreamedEqualsResidentReplayingItsCacheStates) {
  ThreadPool pool(2);
  const int steps = 10;
  for (const char* arch : {"qwen3moe", "mixtral"}) {
    SCOPED_TRACE(arch);
    const Files f = MakeFiles(arch, DType::kQ8_0);
    auto probe = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lfu"), &pool, 0);
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    const uint64_t budget = probe->plan.minimum() + probe->plan.streamed_bytes / 2;
    for (const char* policy : {"lfu", "lru"}) {
      SCOPED_TRACE(policy);
      auto streamed = RunBiased(f.pack, Config(budget, policy), 0.3f, nullptr, &pool, steps);
      ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();
      // A cache state per forward call and layer.
      EXPECT_EQ(streamed->log.size(), static_cast<size_t>((2 + steps) * streamed->n_layers));
      EXPECT_GT(streamed->bias.choices, 0u);
      EXPECT_GT(streamed->bias.changed, 0u) << "the bias should move some choices";
      auto replayed = RunBiased(f.pack, Config(UINT64_MAX, policy), 0.3f, &streamed->log, &pool,
                                steps);
      ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
      EXPECT_EQ(replayed->replayed, streamed->log.size());
      EXPECT_TRUE(Same(replayed->trace, streamed->trace));
      EXPECT_EQ(replayed->bias.changed, streamed->bias.changed);
      // The resident pack without a replayed state: nothing is uncached, so the plain routing.
      auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, policy), &pool, steps);
      ASSERT_TRUE(resident.ok());
      auto plain = RunBiased(f.pack, Config(UINT64_MAX, policy), 0.3f, nullptr, &pool, steps);
      ASSERT_TRUE(plain.ok());
      EXPECT_TRUE(Same(plain->trace, resident->trace));
      EXPECT_EQ(plain->bias.choices, 0u);
      // gamma 1 streamed at the same budget: the plain routing, bit for bit (the cache is not
      // consulted).
      auto off = RunBiased(f.pack, Config(budget, policy), 1.0f, nullptr, &pool, steps);
      ASSERT_TRUE(off.ok());
      EXPECT_TRUE(Same(off->trace, resident->trace));
      EXPECT_TRUE(off->log.empty());
      EXPECT_FALSE(Same(streamed->trace, resident->trace)) << "the bias changed no logits";
    }
  }
}

// --- a hot set from calibration routing counts -------------------------------------------------

// Counts the routing of every token (weir calibrate's observer does the same).
class RoutingCounter final : public ActivationObserver {
 public:
  RoutingCounter(sparsity::Calibrator* c, int n_expert) : c_(c), n_expert_(n_expert) {}
  void OnInput(int, sparsity::Site, const float*, int64_t) override {}
  void OnExperts(int layer, const int32_t* experts, int k) override {
    c_->AddExperts(layer, std::span<const int32_t>(experts, static_cast<size_t>(k)), n_expert_);
  }

 private:
  sparsity::Calibrator* c_;
  int n_expert_;
};

// A pack written with the routing counts of the very tokens a run then decodes stores each layer's
// used experts first, most used first; streamed with --policy hot under a budget that cannot hold
// them all, the cache keeps a prefix of those records (the calibrated top set) and the logits are
// the unordered resident pack's bit for bit.
TEST(StreamingExpertsTest, HotSetFromCalibrationRoutingIsKeptAndLogitsStayBitIdentical) {
  ThreadPool pool(2);
  const int steps = 12;
  for (const char* arch : {"qwen3moe", "mixtral"}) {
    SCOPED_TRACE(arch);
    const Files f = MakeFiles(arch, DType::kQ8_0);
    // Calibrate on the resident pack: greedy decoding as Generate does it.
    sparsity::Calibration cal;
    int n_expert = 0, k = 0, n_layers = 0;
    {
      auto sm = StreamingModel::Open(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"));
      ASSERT_TRUE(sm.ok()) << sm.status().ToString();
      const format::LlamaConfig& c = (*sm)->model().config();
      n_expert = c.n_expert;
      k = c.n_expert_used;
      n_layers = c.n_layers;
      SessionOptions so = streaming_test::SessionFor(&(*sm)->streamer());
      auto s = Session::Create((*sm)->model(), &pool, so);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE((*sm)->Fit((*s)->allocated_bytes()).ok());
      sparsity::Calibrator calibrator(n_layers);
      RoutingCounter counter(&calibrator, n_expert);
      (*s)->set_observer(&counter);
      std::vector<int32_t> prompt = {1, 17, 250, 3, 99};
      auto l = (*s)->Prefill(prompt);
      ASSERT_TRUE(l.ok());
      for (int i = 0; i < steps; ++i) {
        const int32_t tok = Sampler::Argmax(*l, c.vocab_size);
        l = (*s)->Forward(std::span<const int32_t>(&tok, 1), LogitsFor::kLast);
        ASSERT_TRUE(l.ok());
      }
      cal = calibrator.Finish();
    }
    format::PackOptions o;
    o.layout = format::PackLayout::kExperts;
    for (int l = 0; l < n_layers; ++l) {
      const std::vector<uint32_t>& counts = cal.expert_chosen[static_cast<size_t>(l)];
      ASSERT_EQ(counts.size(), static_cast<size_t>(n_expert));
      uint64_t sum = 0;
      for (uint32_t x : counts) sum += x;
      EXPECT_EQ(sum, static_cast<uint64_t>((5 + steps) * k)) << "layer " << l;  // every token
      o.expert_score.emplace_back(counts.begin(), counts.end());
    }
    auto src = format::LoadModel(f.gguf);
    ASSERT_TRUE(src.ok());
    const std::string ordered = f.pack + ".ordered";
    ASSERT_TRUE(format::WritePack(*src, ordered, o).ok());

    // Records hottest first, each the source expert's bytes.
    auto plain_pack = format::PackFile::Open(f.pack);
    auto pack = format::PackFile::Open(ordered);
    ASSERT_TRUE(pack.ok() && plain_pack.ok()) << pack.status().ToString();
    const auto plain_bytes = testing::ReadFile(f.pack);
    const auto bytes = testing::ReadFile(ordered);
    std::vector<int> used(static_cast<size_t>(n_layers), 0);
    for (const format::PackGroup& g : pack->groups()) {
      const auto& counts = cal.expert_chosen[static_cast<size_t>(g.first_layer)];
      ASSERT_EQ(g.expert_order, format::OrderByScore(o.expert_score[static_cast<size_t>(g.first_layer)]));
      const format::PackGroup& pg = plain_pack->groups()[static_cast<size_t>(g.first_layer)];
      for (int r = 0; r < g.n_expert; ++r) {
        const int e = static_cast<int>(g.ExpertInRecord(r));
        EXPECT_EQ(g.ExpertRecord(e), r);
        if (r > 0) {
          EXPECT_GE(counts[static_cast<size_t>(g.ExpertInRecord(r - 1))],
                    counts[static_cast<size_t>(e)]);
        }
        used[static_cast<size_t>(g.first_layer)] += counts[static_cast<size_t>(e)] > 0;
        ASSERT_EQ(std::memcmp(bytes.data() + g.offset + r * g.expert_stride,
                              plain_bytes.data() + pg.offset + e * pg.expert_stride, g.expert_stride),
                  0)
            << "layer " << g.first_layer << " record " << r;
      }
    }

    auto resident = RunPack(f.pack, Memory(f.pack), Config(UINT64_MAX, "lru"), &pool, steps);
    ASSERT_TRUE(resident.ok());
    auto ordered_resident = RunPack(ordered, Memory(ordered), Config(UINT64_MAX, "hot"), &pool, steps);
    ASSERT_TRUE(ordered_resident.ok());
    EXPECT_TRUE(Same(ordered_resident->trace, resident->trace));

    // Streamed under hot with a budget that holds about half the used experts (attention kept in
    // memory so that experts alone share the cache).
    StreamingConfig c = Config(UINT64_MAX, "hot");
    c.stream.stream_attention = false;
    auto probe = RunPack(ordered, Memory(ordered), c, &pool, 0);
    ASSERT_TRUE(probe.ok());
    int all_used = 0;
    for (int u : used) all_used += u;
    const uint64_t stride = pack->groups()[0].expert_stride;
    c.memory_budget = probe->plan.minimum() + stride * static_cast<uint64_t>(all_used / 2);
    for (const char* policy : {"hot", "lfu"}) {
      SCOPED_TRACE(policy);
      c.stream.policy = policy;
      auto sm = StreamingModel::Open(ordered, Memory(ordered), c);
      ASSERT_TRUE(sm.ok());
      SessionOptions so = streaming_test::SessionFor(&(*sm)->streamer());
      {
        auto s = Session::Create((*sm)->model(), &pool, so);
        ASSERT_TRUE(s.ok());
        ASSERT_TRUE((*sm)->Fit((*s)->allocated_bytes()).ok());
      }
      auto got = Generate((*sm)->model(), &(*sm)->streamer(), nullptr, &pool, steps);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_TRUE(Same(*got, resident->trace));
      if (std::string(policy) != "hot") continue;
      // The cache holds, per layer, the first records: the most routed experts.
      int cached_total = 0;
      bool binding = false;
      for (int l = 0; l < n_layers; ++l) {
        const format::PackGroup& g = pack->groups()[static_cast<size_t>(l)];
        const uint64_t* mask = (*sm)->streamer().experts()->CachedExperts(l);
        ASSERT_NE(mask, nullptr);
        std::vector<bool> rec(static_cast<size_t>(n_expert), false);
        int n = 0;
        for (int e = 0; e < n_expert; ++e) {
          if ((mask[e / 64] >> (e % 64)) & 1) {
            rec[static_cast<size_t>(g.ExpertRecord(e))] = true;
            ++n;
          }
        }
        for (int r = 0; r < n; ++r) EXPECT_TRUE(rec[static_cast<size_t>(r)]) << "layer " << l << " record " << r;
        cached_total += n;
        binding |= n < used[static_cast<size_t>(l)];
      }
      EXPECT_GT(cached_total, 0);
      EXPECT_TRUE(binding) << "the budget should not hold every used expert";
    }
  }
}

}  // namespace
}  // namespace weir::model
