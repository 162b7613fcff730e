// StreamPlan: the extents, charges and cache shares of a generated pack, checked against numbers
// worked out here from the pack's own tables (bundles and columns, grouped and not), with a
// charge function simple enough to add up by hand (payload rounded to pages, plus 100 bytes).
#include "model/streaming_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "format/synth_llama.h"
#include "format/weir_pack_reader.h"
#include "format/weir_pack_writer.h"
#include "kernels/tiled.h"
#include "testing/testing.h"

namespace weir::model {
namespace {

constexpr uint64_t kPage = 4096;
uint64_t Charge(uint64_t bytes) { return (bytes + kPage - 1) / kPage * kPage + 100; }

format::SynthSpec Spec(int d_model, int n_layers, int n_head, int n_head_kv, int d_ff) {
  format::SynthSpec s;
  s.d_model = d_model;
  s.n_layers = n_layers;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.d_ff = d_ff;
  s.vocab_size = 270;
  return s;
}

format::PackFile MakePack(format::PackLayout layout, int group,
                          const format::SynthSpec& s = Spec(64, 4, 4, 2, 160)) {
  const std::string dir = testing::TempDir();
  EXPECT_TRUE(format::WriteRandomLlamaGguf(s, DType::kQ8_0, 5, dir + "/m.gguf", nullptr).ok());
  const format::ModelFile src = format::LoadModel(dir + "/m.gguf").value();
  format::PackOptions o;
  o.group_size = group;
  o.layout = layout;
  EXPECT_TRUE(format::WritePack(src, dir + "/m.weir", o).ok());
  return format::PackFile::Open(dir + "/m.weir").value();
}

// The charge of an extent's blocks, added up block by block.
uint64_t ExtentCharge(uint64_t nbytes, uint64_t block) {
  uint64_t c = 0;
  for (uint64_t b = 0; b * block < nbytes; ++b) c += Charge(std::min(block, nbytes - b * block));
  return c;
}

TEST(StreamPlanTest, BundleExtentsChargesAndShares) {
  const format::PackFile pack = MakePack(format::PackLayout::kBundles, 2);
  StreamingOptions o;
  o.block_bytes = 8192;
  o.lane_channels = 64;
  o.partitions = "uniform";
  Result<StreamPlan> built = StreamPlan::Build(pack, o, Charge);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  const StreamPlan& p = *built;
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.n_layers, 4);
  EXPECT_EQ(p.group_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_FALSE(p.columns());
  uint64_t all = 0, max_lane = 0, max_lane_charge = 0;
  uint32_t slab = 0;
  for (size_t g = 0; g < 2; ++g) {
    const StreamPlan::Group& grp = p.groups[g];
    const format::PackGroup& pg = pack.groups()[g];
    EXPECT_EQ(grp.extent.slab, slab++);
    EXPECT_EQ(grp.extent.offset, pg.offset);
    EXPECT_EQ(grp.extent.nbytes, pg.nbytes);
    EXPECT_EQ(grp.extent.n_blocks, (pg.nbytes + 8191) / 8192);
    EXPECT_EQ(grp.extent.partition, g);
    EXPECT_EQ(grp.extent.charge, ExtentCharge(pg.nbytes, 8192));
    EXPECT_EQ(p.partition_charge[g],
              grp.extent.charge + p.attention[2 * g].charge + p.attention[2 * g + 1].charge);
    EXPECT_EQ(grp.n_lanes, 3);  // 160 channels in lanes of 64
    all += grp.extent.charge;
    for (int k = 0; k < 3; ++k) {
      // Lane k's channels [64k, min(64k + 64, 160)) span these blocks.
      const uint64_t b0 = uint64_t{64} * k * pg.bundle_bytes / 8192;
      const uint64_t b1 = (std::min<uint64_t>(64 * k + 64, 160) * pg.bundle_bytes - 1) / 8192;
      max_lane = std::max(max_lane, (b1 - b0 + 1) * 8192);
      max_lane_charge = std::max(max_lane_charge, (b1 - b0 + 1) * Charge(8192));
    }
  }
  // Attention: one extent per layer from q's first byte to output's last, after the groups.
  ASSERT_EQ(p.attention.size(), 4u);
  uint64_t max_attention = 0, max_attention_charge = 0;
  for (int l = 0; l < 4; ++l) {
    const StreamPlan::Extent& a = p.attention[static_cast<size_t>(l)];
    const format::PackTensor* q = pack.FindStatic("blk." + std::to_string(l) + ".attn_q.weight");
    const format::PackTensor* out =
        pack.FindStatic("blk." + std::to_string(l) + ".attn_output.weight");
    EXPECT_EQ(a.slab, static_cast<uint32_t>(2 + l));
    EXPECT_EQ(a.offset, q->offset);
    EXPECT_EQ(a.nbytes, out->offset + out->nbytes - q->offset);
    EXPECT_EQ(a.partition, static_cast<uint32_t>(l / 2));
    EXPECT_EQ(a.charge, ExtentCharge(a.nbytes, 8192));
    EXPECT_EQ(p.tensor_offsets.at("blk." + std::to_string(l) + ".attn_output.weight"),
              (std::pair<int, uint64_t>{l, out->offset - q->offset}));
    all += a.charge;
    max_attention = std::max(max_attention, a.n_blocks * 8192);
    max_attention_charge = std::max(max_attention_charge, a.charge);
  }
  EXPECT_EQ(p.all_blocks_charge, all);
  EXPECT_EQ(p.max_lane_bytes, max_lane);
  EXPECT_EQ(p.max_attention_bytes, max_attention);
  EXPECT_EQ(p.max_pin_charge, max_lane_charge);
  EXPECT_EQ(p.max_attention_charge, max_attention_charge);
  EXPECT_EQ(p.slabs.size(), 6u);
  EXPECT_EQ(p.staging_partition, 2u);
  EXPECT_EQ(
      p.streamed_bytes(), pack.groups()[0].nbytes + pack.groups()[1].nbytes + [&] {
        uint64_t n = 0;
        for (const auto& a : p.attention) n += a.nbytes;
        return n;
      }());
  // Scratch for the largest group: rows, gate/up, 3 lanes of partial sums, tiled records and
  // row indices; and 32 rows of the streamed embedding (64 columns). Small blocks: the deferred
  // releases (16 blocks) count.
  const uint64_t rows = static_cast<uint64_t>(pack.groups()[0].rows());
  const format::PackTensor* table = pack.FindStatic("token_embd.weight");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(p.embedding_offset, table->offset);
  EXPECT_EQ(p.embedding_row_bytes, RowBytes(table->dtype, 64));
  EXPECT_EQ(p.scratch_bytes, 2 * rows * 4 + 2 * 160 * 4 + 3 * 64 * 4 + kernels::TiledPrepBytes(64) +
                                 kernels::TiledPrepBytes(160) + 3 * 160 * 4 +
                                 StreamPlan::kEmbeddingBatchRows * p.embedding_row_bytes);
  EXPECT_EQ(p.fixed_bytes(),
            p.scratch_bytes + std::max(max_lane + 2 * 8192, max_attention) + 16 * 8192);

  // Shares. A budget that holds every block: each group partition its charge, staging the rest.
  // Staging holds at least two lanes or attention extents as charged.
  const uint64_t lo = 2 * std::max(max_lane_charge, max_attention_charge);
  std::vector<uint64_t> w = p.PartitionWeights(all + lo + 5);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0], p.partition_charge[0]);
  EXPECT_EQ(w[1], p.partition_charge[1]);
  EXPECT_EQ(w[2], lo + 5);
  // One that does not: staging a quarter of it within [lo, hi], the groups equal shares of the
  // rest.
  const uint64_t small = all - 1;
  w = p.PartitionWeights(small);
  const uint64_t hi = std::max<uint64_t>(
      lo, 2 * (std::max(p.groups[0].extent.charge, p.groups[1].extent.charge) +
               max_attention_charge));  // prefetch_layers 1
  const uint64_t staging = std::clamp<uint64_t>(small / 4, lo, hi);
  EXPECT_EQ(w[2], staging);
  EXPECT_EQ(p.StagingBytes(small), staging);
  EXPECT_EQ(w[0], (small - staging) / 2);
  EXPECT_EQ(w[1], (small - staging) / 2);
  // Layer blocks for traces.
  const StreamPlan::LayerBlocks lb = p.layer_blocks(3);
  EXPECT_EQ(lb.bundle_slab, 1u);
  EXPECT_EQ(lb.attention_slab, 5u);
  EXPECT_EQ(lb.input_blocks, 0u);
}

TEST(StreamPlanTest, ColumnExtentsAndSharedPartition) {
  const format::PackFile pack = MakePack(format::PackLayout::kColumns, 1);
  StreamingOptions o;
  o.block_bytes = 4096;
  o.input_block_bytes = 8192;
  o.partitions = "shared";
  o.stream_attention = false;
  Result<StreamPlan> built = StreamPlan::Build(pack, o, Charge);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  const StreamPlan& p = *built;
  ASSERT_TRUE(p.columns());
  ASSERT_EQ(p.groups.size(), 4u);
  EXPECT_TRUE(p.attention.empty());
  EXPECT_TRUE(p.tensor_offsets.empty());
  EXPECT_EQ(p.partition_charge.size(), 1u);
  EXPECT_EQ(p.staging_partition, 1u);
  uint64_t all = 0;
  for (size_t g = 0; g < 4; ++g) {
    const StreamPlan::Group& grp = p.groups[g];
    const format::PackGroup& pg = pack.groups()[g];
    // Down columns, then input columns: two slabs per group.
    EXPECT_EQ(grp.extent.slab, 2 * g);
    EXPECT_EQ(grp.in.slab, 2 * g + 1);
    EXPECT_EQ(grp.in.offset, pg.in_offset);
    EXPECT_EQ(grp.in.block_bytes, 8192u);
    EXPECT_EQ(grp.in.n_blocks, (pg.in_nbytes + 8191) / 8192);
    EXPECT_EQ(grp.extent.partition, 0u);
    EXPECT_EQ(grp.in.partition, 0u);
    EXPECT_EQ(grp.n_lanes, 0);
    EXPECT_EQ(grp.in.charge, ExtentCharge(pg.in_nbytes, 8192));
    all += grp.extent.charge + grp.in.charge;
    // Column geometry: channel i of the layer, its gate^T and up^T rows together.
    const auto [b, e] = InputColumn(grp, 3, 0);
    EXPECT_EQ(e - b, 2 * pg.in_row_bytes);
    const auto [db, de] = DownColumn(grp, 5, 0);
    EXPECT_EQ(de - db, pg.row_bytes);
  }
  EXPECT_EQ(p.all_blocks_charge, all);
  EXPECT_EQ(p.partition_charge[0], all);
  // One layer's columns pinned at once: every input block or every down block of it.
  const uint64_t in_bytes = p.groups[0].in.n_blocks * 8192;
  const uint64_t down_bytes = p.groups[0].extent.n_blocks * 4096;
  EXPECT_EQ(p.max_lane_bytes, std::max(in_bytes, down_bytes));
  EXPECT_EQ(p.max_blocks, std::max(p.groups[0].in.n_blocks, p.groups[0].extent.n_blocks));
  EXPECT_EQ(p.streamed_bytes(), [&] {
    uint64_t n = 0;
    for (const auto& g : pack.groups()) n += g.nbytes + g.in_nbytes;
    return n;
  }());
  const StreamPlan::LayerBlocks lb = p.layer_blocks(2);
  EXPECT_EQ(lb.bundle_slab, 4u);
  EXPECT_EQ(lb.input_slab, 5u);
  EXPECT_EQ(lb.attention_blocks, 0u);
}

TEST(StreamPlanTest, BadOptionsAreRefused) {
  const format::PackFile pack = MakePack(format::PackLayout::kBundles, 1);
  StreamingOptions o;
  o.block_bytes = 5000;
  EXPECT_EQ(StreamPlan::Build(pack, o, Charge).status().code(), Status::Code::kInvalidArgument);
  o = StreamingOptions();
  o.lane_channels = 33;
  EXPECT_EQ(StreamPlan::Build(pack, o, Charge).status().code(), Status::Code::kInvalidArgument);
  o = StreamingOptions();
  o.partitions = "halves";
  EXPECT_EQ(StreamPlan::Build(pack, o, Charge).status().code(), Status::Code::kInvalidArgument);
}

// The default blocks follow the layout and the extents' sizes: 2 MiB for W_down and attention
// only where the smallest of them (Q8_0: 1.0625 bytes a weight) holds two 2 MiB blocks.
TEST(StreamPlanTest, DefaultBlocksFollowTheLayoutAndTheExtents) {
  constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;
  auto sizes = [](const format::PackFile& pack, bool attention) {
    const DefaultBlocks d = DefaultBlockSizes(pack, attention);
    return std::make_pair(d.block_bytes, d.input_block_bytes);
  };
  using P = std::pair<size_t, size_t>;
  // Small extents: 64 KiB blocks; the input columns of a grouped pack 4 KiB.
  EXPECT_EQ(sizes(MakePack(format::PackLayout::kBundles, 1), true), P(2 * kMiB, 0));
  EXPECT_EQ(sizes(MakePack(format::PackLayout::kColumns, 1), true), P(64 * kKiB, 64 * kKiB));
  EXPECT_EQ(sizes(MakePack(format::PackLayout::kColumns, 2), true), P(64 * kKiB, 4 * kKiB));
  // d_model 1024, d_ff 2048: a layer's W_down is 2.2 MB, its attention (4 x 1024^2) 4.5 MB.
  // Grouped by two layers every extent holds two 2 MiB blocks; a layer's W_down alone does not.
  const format::SynthSpec wide = Spec(1024, 2, 8, 8, 2048);
  EXPECT_EQ(sizes(MakePack(format::PackLayout::kColumns, 2, wide), true), P(2 * kMiB, 4 * kKiB));
  EXPECT_EQ(sizes(MakePack(format::PackLayout::kColumns, 1, wide), true),
            P(64 * kKiB, 64 * kKiB));
  // On a device throttled to a profile, as the profile's read rates say: ufs4 is faster in large
  // reads, a18-flash is not.
  const format::PackFile large = MakePack(format::PackLayout::kColumns, 2, wide);
  const storage::StorageProfile ufs4 = storage::FindStorageProfile("ufs4").value();
  const storage::StorageProfile a18 = storage::FindStorageProfile("a18-flash").value();
  EXPECT_EQ(DefaultBlockSizes(large, true, &ufs4).block_bytes, 2 * kMiB);
  EXPECT_EQ(DefaultBlockSizes(large, true, &a18).block_bytes, 64 * kKiB);
  EXPECT_EQ(DefaultBlockSizes(large, true, &a18).input_block_bytes, 4 * kKiB);
  EXPECT_EQ(DefaultBlockSizes(MakePack(format::PackLayout::kBundles, 1), true, &a18).block_bytes,
            2 * kMiB);
  // With 2 of 8 heads for k and v a layer's attention is 2.8 MB: small unless it stays static.
  const format::SynthSpec gqa = Spec(1024, 2, 8, 2, 2048);
  const format::PackFile grouped = MakePack(format::PackLayout::kColumns, 2, gqa);
  EXPECT_EQ(sizes(grouped, true), P(64 * kKiB, 4 * kKiB));
  EXPECT_EQ(sizes(grouped, false), P(2 * kMiB, 4 * kKiB));
}

}  // namespace
}  // namespace weir::model
