// StreamPlan: what StreamingWeights (streaming_weights.h) streams from a weir pack
// (format/weir_pack_format.h) and how its cache is shared, computed from the pack's geometry and
// the options alone: no I/O, no cache, no memory but its own tables. The block streamer
// (streaming_blocks.h) and the layouts' MLPs (streaming_bundles.h, streaming_columns.h,
// streaming_experts.h) work from it; StreamPlan::Build is the one place these numbers are made.
//
// Memory. Each streamed extent -- a layer group's bundle tensor, a layer's attention tensors --
// has a slab: a reserved address range as large as the extent (storage/slab_placement.h). The
// cached unit is a *block*: block_bytes (a multiple of 4 KiB) of the extent, cached at its own
// offset in the slab, so resident blocks are, in place, views of the tensors the kernels read
// without a copy. A block that leaves the cache gives its pages back to the OS. Extents and
// blocks are page-aligned in the file, so O_DIRECT reads them straight into the slab.
//
// Cache. One partition per layer group (uniform or proportional shares, or one shared pool)
// under the eviction policy, plus a staging partition that every read lands in, so that reading
// ahead never evicts what the policy keeps. A block the compute used is moved from staging into
// its group's partition when the policy makes room for it and admits it (MRU admits only into
// free room: in a dense scan that keeps a fixed part of every layer and streams the rest).
// PartitionWeights gives the partitions' shares of a budget.
//
// Thread safety: a built plan is immutable; any thread may read it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/weir_pack_reader.h"
#include "storage/eviction_policy.h"
#include "storage/slab_placement.h"
#include "storage/storage_profile.h"

namespace weir::model {

// What span mode reads ahead for the next group (StreamingOptions::span_read_ahead).
enum class SpanAhead { kOff, kToken, kLayer, kBoth };
// "off", "token", "layer", "both"; nullopt for anything else.
std::optional<SpanAhead> ParseSpanAhead(const std::string& name);

struct StreamingOptions {
  uint64_t cache_budget = 0;   // bytes for cached blocks (WeightCache charges)
  std::string policy = "lru";  // eviction policy (storage/eviction_policy.h)
  storage::PolicyOptions policy_options;
  // "uniform": one cache partition per layer group, equal shares (DIP's split);
  // "proportional": shares by group size; "shared": one pool for all groups.
  std::string partitions = "uniform";
  size_t block_bytes = 2 << 20;  // cached unit; a multiple of 4096 (2 MiB: huge pages, large reads)
  // Column layout: the cached unit of the input columns (0 = block_bytes). A pack grouped by
  // layers holds an input channel's rows for every layer of its group in one record of several
  // pages; 4 KiB blocks let a span selection (dip span=N) read just the kept records.
  size_t input_block_bytes = 0;
  int lane_channels = 0;       // channels per partial sum of W_down (a multiple of the
                               // bundle chunk, 32); 0 = about 1 MiB of bundles
  int prefetch_layers = 1;     // layers ahead the I/O thread reads (0 = only the current;
                               // -1 = no read-ahead: every block is read on demand, so the
                               // cache's counters are deterministic and a trace replays exactly)
  size_t io_batch = 64;        // blocks per device read batch
  uint64_t staging_bytes = 0;  // staging partition; 0 = a quarter of the budget, within
                               // [2 lanes, (prefetch_layers + 1) groups]
  bool record_trace = false;   // record block accesses for a later belady run
  // Span mode (dip span=N on a pack written with --group N): read the kept channels' records
  // straight into one compact buffer (storage/record_reader.h), with large reads and no cache
  // entries, instead of pinning their 4 KiB blocks through the cache. The records are then
  // never cached (so DIP-CA sees none of them cached); W_down and attention still are. Off,
  // or when a selection's reads do not fit the buffer, the blocks go through the cache.
  bool compact_span = true;
  // With compact_span: guess the next group's selection and read those records on a thread of
  // their own while this group computes (storage/record_buffers.h; ActiveFlow's cross-layer
  // preloading, paper 002 §3). kToken guesses what the group kept for the previous token,
  // kLayer what the group's first layer's input predicts (the policy's PredictSpan), kBoth the
  // union. Off with prefetch_layers < 0. The memory plan gives it a second record buffer when
  // on. Off by default: on the 1.1B it read more than it hid (docs/streaming.md 3.6).
  SpanAhead span_read_ahead = SpanAhead::kOff;
  // Experts of at least this many bytes are placed at 2 MiB boundaries, so that they get huge
  // pages (one page fault per 2 MiB instead of 512 when an expert is read into memory the cache
  // just gave back). Past an expert's last whole huge page its place takes small pages, so the
  // rounding costs address space, not memory. 0: never. Mixtral 8x7B's 99 MB experts:
  // docs/moe.md, "Experts in huge pages".
  uint64_t huge_expert_places_from = uint64_t{64} << 20;
  // Stream each layer's attention projections too (whole layers, pinned while attention runs);
  // false keeps them static, read into memory once by StreamingModel.
  bool stream_attention = true;
  // With stream_attention and an output head of its own (not tied to token_embd): the token
  // embedding table is not read into memory; each token's row is read from storage when it is
  // embedded (one small read a token), so the table takes none of the budget.
  bool stream_embedding = true;
  // False skips the arithmetic: the cache, its policy and the reads run exactly as they would,
  // which is how `weir sim` replays a trace of a streamed run (model/stream_replay.h).
  bool compute = true;
};

struct StreamPlan {
  // A streamed byte range of the pack with its slab: blocks [0, n_blocks) of block_bytes.
  struct Extent {
    uint32_t slab = 0;       // = UnitLayer of its blocks' ids, and its index in `slabs`
    uint32_t kind = 0;       // unit kind: 1 bundles, 2 attention, 3 input columns
    uint32_t partition = 0;  // cache partition of its blocks
    uint64_t offset = 0;     // file offset (page-aligned)
    uint64_t nbytes = 0;
    uint64_t n_blocks = 0;
    uint64_t block_bytes = 0;  // its cached unit (a multiple of 4 KiB)
    // The distance between its blocks' places in memory (its slab's unit): block_bytes, or for
    // large experts block_bytes rounded up to whole 2 MiB huge pages
    // (StreamingOptions::huge_expert_places_from). Files keep block_bytes between blocks.
    uint64_t place_bytes = 0;
    uint64_t charge = 0;       // cache charge of all its blocks
  };
  struct Group {
    format::PackGroup pack;
    Extent extent;  // the bundle tensor (column layout: the down columns)
    Extent in;      // column layout: the input columns
    bool columns = false;
    bool experts = false;  // experts layout: extent = the layer's experts, block = one expert
    bool sparse = false;   // sparse column layout: records located by the offset tables
    // Experts stored as channel records (pack.expert_columns): the cache's copies of the
    // experts' W_down, which a sparsity policy reads whole at every use. Not a range of the file
    // (offset 0, charge 0: resident mode and the partitions' charges ignore it): block e, at
    // e * block_bytes of its slab, holds expert e's W_down (down_bytes), copied there from the
    // read of its records (streaming_experts.cc). n_blocks = 0 for other groups.
    Extent down_copy;
    uint64_t down_bytes = 0;  // one expert's W_down: d_model rows of d_ff values
    std::vector<uint64_t> in_offsets, down_offsets;
    int n_lanes = 0;
  };
  // A sparse column group's record offset tables (rows + 1 entries each, byte offsets within
  // the input and down extents), read from the pack by ColumnMlp::ReadRecordTables.
  struct RecordTables {
    std::vector<uint64_t> in, down;
  };
  // Charge of a cache entry of `bytes` (storage::WeightCache::EntryCharge for the policy).
  using EntryCharge = std::function<uint64_t(uint64_t bytes)>;

  // The plan of `pack` under `options` (options.cache_budget: the budget at creation).
  // `tables[g]` for each sparse column group g (none needed otherwise). InvalidArgument for bad
  // options, Unsupported for a pack too large to stream, Corrupt for a missing tensor.
  static Result<StreamPlan> Build(const format::PackFile& pack, const StreamingOptions& options,
                                  const EntryCharge& entry_charge,
                                  std::vector<RecordTables> tables = {});

  // Cache partition weights (bytes) for a budget: groups, then staging. `expert_records`: a
  // sparsity policy reads the experts' channel records (expert_records()), so no expert goes
  // through staging, which then holds what the read-ahead brings, a layer's attention, and
  // leaves the rest to the group partitions (the W_down copies). Resident mode's split (the
  // whole pack fits) is the same either way.
  std::vector<uint64_t> PartitionWeights(uint64_t budget, bool expert_records = false) const;
  // The staging partition's share of a budget.
  uint64_t StagingBytes(uint64_t budget, bool expert_records = false) const {
    return PartitionWeights(budget, expert_records).back();
  }
  // Bytes outside the cache the streaming allocates: the MLP scratch (sized for the largest
  // group, scratch_bytes), the record offset tables, the transient reserve (one lane of blocks;
  // column layout: one layer's columns of a matrix; or one layer's attention; experts stored as
  // channel records: the record buffer and one layer's attention) and the released blocks
  // waiting to be given back in one batch (slab_placement.h).
  uint64_t fixed_bytes() const;
  // The transient reserve of fixed_bytes() alone.
  uint64_t reserve_bytes() const;
  // Bytes of the pack streamed (bundles and, with stream_attention, attention).
  uint64_t streamed_bytes() const;
  // True when the pack has the column layout (sparsity can be applied).
  bool columns() const { return !groups.empty() && groups[0].columns; }
  bool experts() const { return !groups.empty() && groups[0].experts; }
  // Experts stored as channel records (weir pack --layout experts-columns).
  bool expert_records() const { return experts() && groups[0].pack.expert_columns; }
  const Group& group_of_layer(int layer) const {
    return groups[static_cast<size_t>(group_of[static_cast<size_t>(layer)])];
  }
  uint32_t PartitionOf(int group) const {
    return options.partitions == "shared" ? 0u : static_cast<uint32_t>(group);
  }
  // Where layer `layer`'s blocks are, for traces: the unit-id layer field (slab) and block count
  // of its attention extent (blocks 0 when attention is static), of its group's bundles (column
  // layout: down columns) and, column layout only, of its group's input columns (else 0).
  struct LayerBlocks {
    uint32_t attention_slab = 0, attention_blocks = 0, bundle_slab = 0, bundle_blocks = 0;
    uint32_t input_slab = 0, input_blocks = 0;
  };
  LayerBlocks layer_blocks(int layer) const;

  StreamingOptions options;  // as built (cache_budget: the budget at creation)
  int d_model = 0;
  int n_layers = 0;
  int lane_channels = 0;  // channels per lane (bundle layout)
  std::vector<Group> groups;
  std::vector<int> group_of;      // per layer
  std::vector<Extent> attention;  // per layer (stream_attention)
  // Streamed static tensors ("blk.3.attn_q.weight"): layer and byte offset in its attention
  // extent.
  std::map<std::string, std::pair<int, uint64_t>> tensor_offsets;
  std::vector<storage::SlabPlacement::Slab> slabs;  // one per extent, by Extent::slab
  uint64_t deferred_release_bytes = 0;              // SlabPlacement's release batch
  uint64_t all_blocks_charge = 0;                   // what the cache is charged to hold every block
  std::vector<uint64_t> partition_charge;           // per group partition: all blocks it may hold
  uint32_t staging_partition = 0;
  uint64_t max_lane_bytes = 0;  // blocks pinned at once for one lane (or layer of columns)
  // What staging must hold twice, as the cache charges it (every entry carries its header, index
  // and policy bytes beside the payload: staging sized by payload bytes alone held one expert of
  // two): the most MLP blocks pinned at once (a lane of bundle blocks, one expert, a layer of
  // columns, or a group's records and W_down; a compact span read's records are not pinned), and
  // the largest attention extent.
  uint64_t max_pin_charge = 0;
  uint64_t max_attention_charge = 0;
  // Column packs: the compact span buffer (compact_span, grouped packs: the input share of the
  // transient reserve, which the records then do not use).
  uint64_t record_buffer_bytes = 0;
  // Span mode's reserve loan (column packs grouped by layers, compact_span). The transient
  // reserve of fixed_bytes() holds a group's records and its W_down at once, for a cache too
  // small to pin W_down; the records have their own buffer. When every selection's records fit
  // that buffer (SpanRecordsFit) and the cache can pin the most the compute pins at once
  // (span_pin_floor_bytes: one layer's input columns or a group's W_down, one layer's
  // attention, two blocks of slack, each as the cache charges it), no read is ever transient and
  // the rest of the reserve (span_lendable_bytes) is lent to the cache (StreamingModel::Plan).
  uint64_t span_lendable_bytes = 0;
  uint64_t span_pin_floor_bytes = 0;
  // True when a span selection of at most `kept` channels always fits the record buffer, in
  // every group: the reads (storage::RecordReader) cover at most the pages of the kept records
  // (a record of r bytes touches at most ceil(r / 4096) + 1 pages) and at most the group's input
  // extent.
  bool SpanRecordsFit(int64_t kept) const;
  // The second record buffer a read-ahead of the next group's records needs (StreamingOptions::
  // span_read_ahead): not in fixed_bytes(); StreamingModel gives it from what the budget leaves
  // the cache when that is large enough (BlockStreamer::set_record_ahead).
  uint64_t record_ahead_bytes = 0;
  uint64_t max_group_charge = 0;  // MLP blocks' charge of the largest group (experts: chosen ones)
  int max_group_layers = 1;      // layers of the largest group
  // The token embedding table when streamed (stream_embedding): where it is in the pack and the
  // bytes of one row; embedding_row_bytes == 0 when it is static.
  uint64_t embedding_offset = 0, embedding_row_bytes = 0;
  int64_t embedding_rows = 0;
  // Rows read together, in one batch of reads (a prompt's tokens): the scratch holds this many.
  static constexpr int kEmbeddingBatchRows = 32;
  uint64_t max_attention_bytes = 0;  // blocks of the largest attention extent
  // Sizes of the largest group, for the MLP scratch: rows of its tensor (gate/up/down rows;
  // columns: input or down rows), max(d_ff, d_model), lanes, blocks of a column extent.
  int64_t max_rows = 0, max_ff = 0, max_lanes = 0;
  uint64_t max_blocks = 0;
  uint64_t scratch_bytes = 0;  // MLP scratch any layout allocates at most (fixed_bytes)
};

// The cached units StreamingModel uses for a pack when none is asked for
// (StreamingOptions::block_bytes and input_block_bytes of 0), from the pack's layout and the sizes
// of its extents:
// - bundle and experts packs: 2 MiB blocks (huge pages, large reads; an expert is one block);
// - column packs: the W_down and attention extents are read whole by every layer except under
//   down pruning, so they take 2 MiB blocks when the smallest of them holds at least two of
//   them (one cache entry, one read and huge pages per 2 MiB, and the hot policy can still keep
//   a share of each extent), 64 KiB when the extents are smaller (a 2 MiB block would be a
//   whole extent: all or nothing in the cache). The input columns keep small blocks, so that a
//   sparse read follows the kept channels: 64 KiB, or 4 KiB in a pack grouped by layers, whose
//   records of several pages a span selection keeps or skips whole;
// - except on a device throttled to a storage profile whose read rate hardly depends on the read
//   size (64 KiB reads at 90 % or more of 2 MiB reads' rate, storage::ModelThroughput: a18-flash):
//   there large blocks gain nothing and make the compute wait for more bytes before it can use
//   any, so column packs keep 64 KiB. Without a profile the device is real storage, faster in
//   large reads (ActiveFlow Fig. 7; this machine's disk, docs/storage.md).
// Measured in docs/streaming.md 3.10 (1.1B column pack, extents of 5.3 and 26 MB, span mode):
// 1.19x faster with 2 MiB blocks than with 64 KiB in a cgroup of 25 % of the pack, 1.04x at
// 50 %; under a18-flash 0.93-0.98x; SmolLM2's column pack (extents under 1 MB) 0.91-0.92x.
struct DefaultBlocks {
  size_t block_bytes = 0;
  size_t input_block_bytes = 0;  // 0: as block_bytes (packs without input columns)
};
// `profile`: the storage profile the device is throttled to (null: none).
DefaultBlocks DefaultBlockSizes(const format::PackFile& pack, bool stream_attention,
                                const storage::StorageProfile* profile = nullptr);

// Geometry of a plan's groups (pure functions of the plan).
// First and last block of a group's bundle tensor holding channels [c0, c1).
std::pair<uint64_t, uint64_t> BlocksOf(const StreamPlan::Group& g, int64_t c0, int64_t c1);
// Byte ranges (within the extents) of a column-layout group: input channel i (its gate^T and
// up^T rows) / neuron c of its layer j.
std::pair<uint64_t, uint64_t> InputColumn(const StreamPlan::Group& g, int64_t i, int j);
std::pair<uint64_t, uint64_t> DownColumn(const StreamPlan::Group& g, int64_t c, int j);
// Appends the blocks of e holding bytes [begin, end) of it (a block equal to the last one is
// not repeated; the list is sorted and made unique after the calls, SortBlocks).
void AddBlocks(const StreamPlan::Extent& e, uint64_t begin, uint64_t end,
               std::vector<uint64_t>* blocks);
// Columns are visited in channel order, which is file order only in a pack without an
// activation order: the block list is put in ascending order, each block once.
void SortBlocks(std::vector<uint64_t>* blocks);

}  // namespace weir::model
