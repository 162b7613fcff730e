#include "model/streaming_model.h"

#include <algorithm>
#include <optional>

#include "base/anon_region.h"
#include "base/memory_info.h"
#include "base/units.h"
#include "format/mapped_file.h"

namespace weir::model {

namespace {

constexpr uint64_t kPage = 4096;
// Static tensors from this size on get huge pages.
constexpr uint64_t kHugeStaticBytes = uint64_t{32} << 20;
uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Owns the static tensors' bytes for the ModelFile's views: one anonymous region (huge pages
// advised, as a resident model's weights), each tensor at a page-aligned offset for O_DIRECT.
struct StaticBuffers : format::Backing {
  AnonRegion region;
};

uint64_t Add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

std::string MemoryPlan::ToString() const {
  const bool unlimited = budget == UINT64_MAX;
  // The cache's split: staging, and with W_down copies (channel-record experts under a policy)
  // what one is charged.
  std::string cache = FormatBytes(cache_bytes) + " (staging " + FormatBytes(staging_bytes);
  if (down_copy_bytes > 0) {
    cache += StrFormat(", room for %llu of %llu W_down copies of %s beside attention",
                       static_cast<unsigned long long>(down_copies_fit),
                       static_cast<unsigned long long>(down_copies_total),
                       FormatBytes(down_copy_bytes).c_str());
  }
  cache += ")";
  return StrFormat(
      "process %s + static %s + session %s + streamer %s + io %s + policy %s%s + cache %s = %s "
      "(streamed %s)",
      FormatBytes(process_bytes).c_str(), FormatBytes(static_bytes).c_str(),
      FormatBytes(session_bytes).c_str(),
      reserve_lent_bytes > 0
          ? (FormatBytes(streamer_bytes - reserve_lent_bytes) + " (" +
             FormatBytes(reserve_lent_bytes) + " of its reserve lent to the cache)")
                .c_str()
          : FormatBytes(streamer_bytes).c_str(),
      FormatBytes(io_bytes).c_str(), FormatBytes(policy_bytes).c_str(),
      record_ahead_bytes > 0
          ? (" + span read-ahead " + FormatBytes(record_ahead_bytes)).c_str()
          : "",
      unlimited ? "unlimited" : cache.c_str(),
      unlimited
          ? "no limit"
          : FormatBytes(Add(Add(minimum(), record_ahead_bytes), cache_bytes) - reserve_lent_bytes)
                .c_str(),
      FormatBytes(streamed_bytes).c_str());
}

Result<std::unique_ptr<StreamingModel>> StreamingModel::Open(const std::string& path,
                                                             const StreamingConfig& config) {
  WEIR_ASSIGN_OR_RETURN(std::unique_ptr<storage::BlockDevice> device,
                        storage::OpenDevice(path, config.device));
  StreamingConfig c = config;
  if (c.device.kind == "auto") {
    // The kind that opened ("io_uring+direct:PATH"): the plan counts its buffers.
    c.device.kind = device->name().substr(0, device->name().find(':'));
  }
  return Open(path, std::move(device), c);
}

StreamingModel::~StreamingModel() {
  streamer_.reset();  // its cache and I/O thread go before the device
}

Result<std::unique_ptr<StreamingModel>> StreamingModel::Open(
    const std::string& path, std::unique_ptr<storage::BlockDevice> device,
    const StreamingConfig& config) {
  std::unique_ptr<StreamingModel> m(new StreamingModel());
  m->path_ = path;
  m->config_ = config;
  m->device_ = std::move(device);
  uint64_t region_bytes = 0;  // the static tensors' region, all of it read (resident)
  {
    // The pack's parse (metadata, vocabulary arrays) lives only in this block: the process is
    // measured after it, below.
    WEIR_ASSIGN_OR_RETURN(format::PackFile pack, format::PackFile::Open(path));
    StreamingOptions mo = config.stream;
    mo.cache_budget = 0;  // planned by Fit
    // Blocks asked for are kept; the input columns of a pack grouped by layers take 4 KiB blocks
    // whatever the others' (a span selection keeps or skips a record of several pages whole).
    // Each block is a cache entry with its own lookup, pin and bookkeeping, which is why no
    // layout defaults to 4 KiB: on SmolLM2 its column pack at a budget of static + KV + 50 % of
    // the MLP decoded 8.8 tok/s with 4 KiB blocks and 16.7 / 18.8 / 23.8 with 16 / 64 / 256 KiB
    // (dense, --policy mru, outside a cgroup; docs/streaming.md, 3.2).
    std::optional<storage::StorageProfile> profile;  // the device's throttle (OpenDevice checked it)
    if (Result<storage::StorageProfile> p = storage::FindStorageProfile(config.device.profile); p.ok())
      profile = *p;
    const DefaultBlocks defaults =
        DefaultBlockSizes(pack, mo.stream_attention, profile ? &*profile : nullptr);
    if (mo.input_block_bytes == 0 && format::IsColumnLayout(pack.layout()) &&
        (pack.group_size() > 1 || mo.block_bytes == 0)) {
      mo.input_block_bytes = defaults.input_block_bytes;
    }
    if (mo.block_bytes == 0) mo.block_bytes = defaults.block_bytes;
    if (mo.prefetch_layers == kPrefetchAuto) {
      mo.prefetch_layers = pack.layout() == format::PackLayout::kExperts ? 0 : 1;
    }
    m->config_.stream.prefetch_layers = mo.prefetch_layers;
    if (mo.policy == "auto") {
      // A token sweeps the layers in order, so a cache smaller than the sweep must pin a fixed
      // part of it (LRU and LFU evict what is needed next). hot pins the leading blocks of every
      // extent, so every layer keeps a share and reads the rest in one run: the disk stays busy
      // through the token. mru pins what came first (the first layers whole, the last ones not at
      // all), so the disk idles while the cached layers compute, with one layer read ahead:
      // 1.1B at 296 MiB, dense bundles 4.5-5.4 tok/s with hot against 3.7-4.3 with mru, span
      // mode 4.2-5.9 against 4.7-5.0 (docs/streaming.md 3.8). Experts are chosen by the router,
      // so the ones a context keeps choosing stay (lfu, counts reset per sequence).
      mo.policy = pack.layout() == format::PackLayout::kExperts ? "lfu" : "hot";
    }
    m->config_.stream.policy = mo.policy;
    m->config_.stream.block_bytes = mo.block_bytes;
    m->config_.stream.input_block_bytes = mo.input_block_bytes;
    WEIR_ASSIGN_OR_RETURN(m->streamer_, StreamingWeights::Create(pack, m->device_.get(), mo));
    const uint64_t in_block = mo.input_block_bytes > 0 ? mo.input_block_bytes : mo.block_bytes;
    for (const format::PackGroup& g : pack.groups()) {
      m->total_blocks_ += (g.nbytes + mo.block_bytes - 1) / mo.block_bytes +
                          (g.in_nbytes + in_block - 1) / in_block;
      if (g.expert_columns) m->total_blocks_ += static_cast<uint64_t>(g.n_expert);  // W_down copies
    }
    m->plan_.streamed_bytes = m->streamer_->streamed_bytes();
    // Static: what is neither streamed in blocks nor read a row at a time (the embedding).
    const bool embedding_streamed = m->streamer_->embedding_streamed();
    auto is_static = [&](const format::PackTensor& t) {
      if (m->streamer_->TensorAddress(t.name) != nullptr) return false;
      return !(embedding_streamed && t.name == "token_embd.weight");
    };
    for (const format::PackTensor& t : pack.static_tensors()) {
      if (is_static(t)) m->plan_.static_bytes += RoundUp(t.nbytes, kPage);
    }
    // They live in one region (below), of huge pages when large (AnonRegion leaves a last partial
    // huge page on small pages, so the page-rounded sizes above are what can be committed).
    const bool huge_statics = m->plan_.static_bytes >= kHugeStaticBytes;
    if (config.count_process) {
      if (std::optional<uint64_t> rss = ResidentBytes()) m->plan_.process_bytes = *rss;
    }
    // What can be checked before the session exists.
    MemoryPlan early;
    if (Status st = m->Plan(config.memory_budget, 0, &early); !st.ok()) return st;

    // The static tensors, read through the device into page-aligned places of one region.
    auto statics = std::make_shared<StaticBuffers>();
    for (const format::PackTensor& t : pack.static_tensors()) {
      if (is_static(t)) region_bytes += RoundUp(t.nbytes, kPage);
    }
    if (region_bytes > 0) {
      auto region = AnonRegion::Create(static_cast<size_t>(region_bytes), huge_statics);
      if (!region.ok()) return region.status().WithContext(path + ": static tensors");
      statics->region = std::move(region).value();
    }
    uint64_t region_used = 0;
    format::ModelFile file;
    file.path = path;
    file.format = format::FileFormat::kGguf;
    file.config = pack.config();
    file.tokenizer = pack.tokenizer();
    file.metadata = pack.RenderMetadata();
    for (const format::PackTensor& t : pack.static_tensors()) {
      if (const std::byte* p = m->streamer_->TensorAddress(t.name)) {
        // Streamed (attention): the view points where the streamer pins its bytes.
        TensorView v{t.dtype, t.shape, p};
        v.layout = t.layout;
        file.tensors.emplace(t.name, v);
        file.tensor_order.push_back(t.name);
        continue;
      }
      if (!is_static(t)) {
        // The embedding, read a row at a time (Session::Embed): it stands in by shape.
        file.tensors.emplace(t.name, TensorView{t.dtype, t.shape, nullptr});
        file.tensor_order.push_back(t.name);
        continue;
      }
      const size_t capacity = static_cast<size_t>(RoundUp(t.nbytes, kPage));
      std::byte* dst = statics->region.data() + region_used;
      region_used += capacity;
      const size_t len = storage::RoundedReadLength(*m->device_, t.offset,
                                                    static_cast<size_t>(t.nbytes), dst, capacity);
      if (Status st = m->device_->ReadAt(t.offset, len, dst); !st.ok()) {
        return st.WithContext(StrFormat("%s: reading %s", path.c_str(), t.name.c_str()));
      }
      TensorView v{t.dtype, t.shape, dst};
      v.layout = t.layout;
      file.tensors.emplace(t.name, v);
      file.tensor_order.push_back(t.name);
    }
    // The MLP tensors stand in by shape only: StreamingWeights computes them.
    pack.AddMlpStandIns(&file);
    file.backing.push_back(std::move(statics));
    WEIR_ASSIGN_OR_RETURN(m->model_, Model::FromFile(std::move(file)));
    m->plan_ = early;
  }
  // The parse read the pack's metadata through the page cache; a limit that counts the page
  // cache would charge it to the budget (8 MB on the 1.1B pack). The weights are read around it.
  format::DropCachedPages(path);
  if (config.count_process) {
    // The process as it runs: the model's tokenizer and metadata built, the pack's parse freed
    // and the heap's free pages given back (copies made while loading would otherwise stay
    // resident as holes in the heap, outside every share: on SmolLM2 the first measurement,
    // taken before the model was built, was 8.6 MiB short). The static region is its own share.
    ReturnFreeHeap();
    if (std::optional<uint64_t> rss = ResidentBytes()) {
      m->plan_.process_bytes = *rss > region_bytes ? *rss - region_bytes : 0;
    }
    MemoryPlan checked;
    WEIR_RETURN_IF_ERROR(m->Plan(config.memory_budget, 0, &checked));
  }
  return m;
}

Status StreamingModel::Plan(uint64_t budget, uint64_t session_bytes, MemoryPlan* plan) const {
  MemoryPlan p = plan_;
  p.budget = budget;
  p.session_bytes = session_bytes;
  p.streamer_bytes = streamer_->fixed_bytes();
  const storage::DeviceOptions& d = config_.device;
  const bool direct = d.kind.find("direct") != std::string::npos;
  const bool uring = d.kind.find("io_uring") != std::string::npos;
  // O_DIRECT bounce buffers (I/O thread and compute thread; reads are page-aligned, so a bounce
  // covers at most the unaligned tail of the file, within one block),
  // io_uring rings (64-byte submission and 16-byte completion entries, both sides doubled), and
  // about 256 bytes of queue bookkeeping per block that can be in flight.
  p.io_bytes = (direct ? 2 * std::min<uint64_t>(d.bounce_bytes, config_.stream.block_bytes) : 0) +
               (uring ? uint64_t{d.max_rings} * d.queue_depth * 160 : 0) +
               256 * std::min<uint64_t>(total_blocks_, 4096);
  const std::string& policy = config_.stream.policy;
  p.policy_bytes = policy == "lfu" ? 64 * total_blocks_ : 4096;
  if (policy == "belady")
    p.policy_bytes += 16 * config_.stream.policy_options.belady_trace.size() + 64 * total_blocks_;
  if (budget < p.minimum()) {
    return Status::OutOfMemory(StrFormat(
        "%s: memory budget %s is below the minimum %s (the process before the weights %s, static "
        "tensors %s, KV cache and activations %s, "
        "streaming scratch and transient reads %s, I/O buffers %s, policy %s; the cache of "
        "streamed weights gets what is left above that)",
        path_.c_str(), FormatBytes(budget).c_str(), FormatBytes(p.minimum()).c_str(),
        FormatBytes(p.process_bytes).c_str(), FormatBytes(p.static_bytes).c_str(),
        FormatBytes(p.session_bytes).c_str(), FormatBytes(p.streamer_bytes).c_str(),
        FormatBytes(p.io_bytes).c_str(), FormatBytes(p.policy_bytes).c_str()));
  }
  p.cache_bytes = budget - p.minimum();
  // Span mode's read-ahead buffer: once made it stays; before, it is given when the cache keeps
  // at least as much again (a small cache is worth more than the overlap).
  const uint64_t ahead = streamer_->record_ahead_bytes();
  p.record_ahead_bytes = 0;
  if (streamer_->record_ahead_made()) {
    if (p.cache_bytes < ahead) {
      return Status::OutOfMemory(StrFormat(
          "%s: memory budget %s is below the minimum %s and the span read-ahead buffer %s "
          "already in use",
          path_.c_str(), FormatBytes(budget).c_str(), FormatBytes(p.minimum()).c_str(),
          FormatBytes(ahead).c_str()));
    }
    p.record_ahead_bytes = ahead;
  } else if (ahead > 0 && (budget == UINT64_MAX || p.cache_bytes >= 2 * ahead)) {
    p.record_ahead_bytes = ahead;
  }
  p.cache_bytes -= p.record_ahead_bytes;
  // The reserve's loan: with the cache able to pin everything pinned at once, no read is
  // transient, and the reserve beyond the record buffer holds nothing (StreamPlan).
  p.reserve_lent_bytes = 0;
  const uint64_t lend = p.record_ahead_bytes == 0 ? streamer_->lendable_reserve() : 0;
  if (lend > 0 && budget != UINT64_MAX && p.cache_bytes + lend >= streamer_->span_pin_floor()) {
    p.reserve_lent_bytes = lend;
    p.cache_bytes += lend;
  }
  p.staging_bytes =
      budget == UINT64_MAX ? 0 : std::min(p.cache_bytes, streamer_->staging_bytes(p.cache_bytes));
  p.down_copy_bytes = streamer_->sparse_experts() ? streamer_->down_copy_charge() : 0;
  p.down_copies_total = p.down_copy_bytes > 0 ? streamer_->down_copies_total() : 0;
  p.down_copies_fit = budget == UINT64_MAX ? p.down_copies_total
                                           : streamer_->down_copies_fit(p.cache_bytes);
  *plan = p;
  return Status::Ok();
}

Status StreamingModel::Fit(uint64_t session_bytes) {
  MemoryPlan p;
  WEIR_RETURN_IF_ERROR(Plan(config_.memory_budget, session_bytes, &p));
  WEIR_RETURN_IF_ERROR(streamer_->SetCacheBudget(p.cache_bytes));
  streamer_->set_record_ahead(p.record_ahead_bytes > 0);
  plan_ = p;
  return Status::Ok();
}

Status StreamingModel::SetMemoryBudget(uint64_t bytes) {
  MemoryPlan p;
  WEIR_RETURN_IF_ERROR(Plan(bytes, plan_.session_bytes, &p));
  WEIR_RETURN_IF_ERROR(streamer_->SetCacheBudget(p.cache_bytes));
  streamer_->set_record_ahead(p.record_ahead_bytes > 0);
  config_.memory_budget = bytes;
  plan_ = p;
  return Status::Ok();
}

}  // namespace weir::model
