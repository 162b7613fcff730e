#include "m2cache/file_source.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/check.h"

namespace weir::m2cache {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

Result<std::unique_ptr<FileSource>> FileSource::Create(const StoreIndex& index, storage::BlockDevice* device,
                                                       const FileSourceOptions& options) {
  if (index.layers.empty()) return Status::InvalidArgument(index.path + ": the store has no layers");
  if (options.window < 0 || options.window > 64) {
    return Status::InvalidArgument("m2cache: a preload window of " + std::to_string(options.window) +
                                   " layers (0 to 64)");
  }
  const size_t align = std::max<size_t>({kStoreExtentAlignment, device->required_alignment(),
                                         device->preferred_alignment()});
  if (align > kStoreExtentAlignment) {
    return Status::Unsupported(device->name() + " requires reads aligned to " + std::to_string(align) +
                               " bytes; a store file's layers are aligned to 4096");
  }
  auto s = std::unique_ptr<FileSource>(new FileSource(index, device));
  s->budget_bytes_ = options.budget_bytes;
  s->window_ = options.window;
  const int n = static_cast<int>(index.layers.size());
  const uint64_t total = index.extent_bytes(), max_extent = index.max_extent_bytes();
  int n_fixed = n, buffers = 0;
  if (total > options.budget_bytes) {
    const uint64_t dynamic = static_cast<uint64_t>(options.window + 1) * max_extent;
    if (dynamic > options.budget_bytes) {
      return Status::InvalidArgument(
          "m2cache: a memory budget of " + std::to_string(options.budget_bytes) + " bytes (" +
          Mib(options.budget_bytes) + ") cannot hold the preload window: " + std::to_string(options.window + 1) +
          " buffers (the acquired layer and " + std::to_string(options.window) + " ahead) of the largest layer's " +
          std::to_string(max_extent) + " bytes = " + std::to_string(dynamic) + " bytes (" + Mib(dynamic) +
          "); the whole store is " + std::to_string(total) + " bytes (" + Mib(total) + ")");
    }
    uint64_t used = dynamic;
    n_fixed = 0;
    while (n_fixed < n && used + index.layers[static_cast<size_t>(n_fixed)].extent.bytes <= options.budget_bytes) {
      used += index.layers[static_cast<size_t>(n_fixed)].extent.bytes;
      ++n_fixed;
    }
    buffers = std::min(options.window + 1, n - n_fixed);
  }
  s->n_fixed_ = n_fixed;
  // Allocate everything up front, then fill the fixed area (synchronously: an error fails Create).
  for (int l = 0; l < n_fixed; ++l) {
    const StoreLayer& sl = index.layers[static_cast<size_t>(l)];
    AlignedBuffer buf;
    if (!buf.Reset(static_cast<size_t>(sl.extent.bytes), align)) {
      return Status::OutOfMemory("m2cache: cannot allocate " + Mib(sl.extent.bytes) + " for layer " + std::to_string(l));
    }
    s->allocated_bytes_ += sl.extent.bytes;
    s->fixed_buffers_.push_back(std::move(buf));
  }
  s->slots_.resize(static_cast<size_t>(buffers));
  for (Slot& slot : s->slots_) {
    if (!slot.buffer.Reset(static_cast<size_t>(max_extent), align)) {
      return Status::OutOfMemory("m2cache: cannot allocate a preload buffer of " + Mib(max_extent));
    }
    s->allocated_bytes_ += max_extent;
  }
  for (int l = 0; l < n_fixed; ++l) {
    const StoreLayer& sl = index.layers[static_cast<size_t>(l)];
    uint8_t* base = s->fixed_buffers_[static_cast<size_t>(l)].data<uint8_t>();
    const auto t0 = Clock::now();
    WEIR_RETURN_IF_ERROR(device->ReadAt(sl.extent.offset, static_cast<size_t>(sl.extent.bytes), base)
                             .WithContext(index.path + ": layer " + std::to_string(l)));
    s->stats_.read_seconds += Seconds(Clock::now() - t0);
    s->stats_.bytes_read += sl.extent.bytes;
    s->stats_.reads += 1;
    s->fixed_rows_.push_back(s->RowsAt(l, base));
  }
  if (!s->slots_.empty()) {
    s->SetWanted(n_fixed > 0 ? n_fixed - 1 : 0);  // the first dynamic layers
    s->preloader_ = std::thread([p = s.get()] { p->PreloadLoop(); });
  }
  return s;
}

FileSource::~FileSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (preloader_.joinable()) preloader_.join();
}

LayerShape FileSource::shape(int layer) const {
  const StoreLayer& sl = index_.layers[static_cast<size_t>(layer)];
  return {sl.d_ff, sl.d_model};
}

LayerNeurons FileSource::RowsAt(int layer, const uint8_t* base) const {
  const StoreLayer& sl = index_.layers[static_cast<size_t>(layer)];
  LayerNeurons ln;
  ln.d_ff = sl.d_ff;
  ln.d_model = sl.d_model;
  const Shape shape{sl.d_ff, sl.d_model};
  for (int p = 0; p < kNumPrecisions; ++p) {
    const DType t = type(static_cast<Precision>(p));
    TensorView* to[3] = {&ln.at[p].gate, &ln.at[p].up, &ln.at[p].down_t};
    for (int k = 0; k < 3; ++k) {
      *to[k] = TensorView{t, shape, base + (sl.matrix[p][k].offset - sl.extent.offset)};
    }
  }
  return ln;
}

// The dynamic layer decode reads after `layer`, wrapping from the last layer to the first layer
// outside the fixed area.
int FileSource::NextDynamic(int layer) const {
  const int next = layer + 1;
  return next < n_layers() && next >= n_fixed_ ? next : n_fixed_;
}

void FileSource::SetWanted(int layer) {
  std::vector<int> want;
  int x = layer;
  if (layer >= n_fixed_) {
    want.push_back(layer);
  } else {
    x = n_fixed_;
    want.push_back(x);
  }
  while (want.size() < slots_.size()) {
    x = NextDynamic(x);
    if (x == want.front()) break;
    want.push_back(x);
  }
  if (want != wanted_) {
    wanted_ = std::move(want);
    cv_.notify_all();
  }
}

bool FileSource::IsWanted(int layer) const {
  return std::find(wanted_.begin(), wanted_.end(), layer) != wanted_.end();
}

// The nearest wanted layer that no buffer holds, and a buffer free to take it.
bool FileSource::NextJob(int* layer, Slot** slot) {
  for (int l : wanted_) {
    const bool held = std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.layer == l; });
    if (held) continue;
    Slot* victim = nullptr;
    for (Slot& s : slots_) {
      if (s.pins > 0 || s.state == SlotState::kLoading || (s.layer >= 0 && IsWanted(s.layer))) continue;
      if (victim == nullptr || s.layer < 0) victim = &s;
    }
    if (victim == nullptr) return false;  // every buffer is busy; later layers are further away
    *layer = l;
    *slot = victim;
    return true;
  }
  return false;
}

void FileSource::PreloadLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    int layer = -1;
    Slot* slot = nullptr;
    cv_.wait(lock, [&] { return stop_ || NextJob(&layer, &slot); });
    if (stop_) return;
    slot->layer = layer;
    slot->state = SlotState::kLoading;
    slot->error = Status::Ok();
    const StoreLayer& sl = index_.layers[static_cast<size_t>(layer)];
    uint8_t* base = slot->buffer.data<uint8_t>();
    lock.unlock();
    const auto t0 = Clock::now();
    Status st = device_->ReadAt(sl.extent.offset, static_cast<size_t>(sl.extent.bytes), base);
    const double seconds = Seconds(Clock::now() - t0);
    lock.lock();
    stats_.read_seconds += seconds;
    stats_.reads += 1;
    if (st.ok()) {
      stats_.bytes_read += sl.extent.bytes;
      slot->rows = RowsAt(layer, base);
      slot->state = SlotState::kReady;
    } else {
      slot->error = st.WithContext(index_.path + ": layer " + std::to_string(layer));
      slot->state = SlotState::kFailed;
    }
    cv_.notify_all();
  }
}

Result<const LayerNeurons*> FileSource::Acquire(int layer) {
  if (layer < 0 || layer >= n_layers()) {
    return Status::InvalidArgument(index_.path + ": layer " + std::to_string(layer) + " of a store of " +
                                   std::to_string(n_layers()) + " layers");
  }
  std::unique_lock<std::mutex> lock(mu_);
  stats_.acquires += 1;
  if (!slots_.empty()) SetWanted(layer);
  if (layer < n_fixed_) return &fixed_rows_[static_cast<size_t>(layer)];
  const auto t0 = Clock::now();
  bool waited = false;
  Result<const LayerNeurons*> out = Status::Internal("unreachable");
  for (;;) {
    auto it = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.layer == layer; });
    if (it != slots_.end() && it->state == SlotState::kReady) {
      it->pins += 1;
      out = &it->rows;
      break;
    }
    if (it != slots_.end() && it->state == SlotState::kFailed) {
      out = it->error;  // handed over once; the buffer is free and the next Acquire reads again
      it->error = Status::Ok();
      it->state = SlotState::kEmpty;
      it->layer = -1;
      cv_.notify_all();
      break;
    }
    if (it == slots_.end() &&
        std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pins > 0; })) {
      out = Status::InvalidArgument(index_.path + ": layer " + std::to_string(layer) + " acquired while all " +
                                    std::to_string(slots_.size()) + " preload buffers are acquired");
      break;
    }
    waited = true;
    cv_.wait(lock);
  }
  if (waited) {
    stats_.waits += 1;
    stats_.stall_seconds += Seconds(Clock::now() - t0);
  }
  return out;
}

void FileSource::Release(int layer) {
  if (layer < n_fixed_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.layer == layer && s.pins > 0; });
  WEIR_CHECK(it != slots_.end());  // a Release without its Acquire is a bug of the caller
  it->pins -= 1;
  cv_.notify_all();
}

SourceStats FileSource::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string FileSource::Describe() const {
  uint64_t fixed = 0;
  for (int l = 0; l < n_fixed_; ++l) fixed += index_.layers[static_cast<size_t>(l)].extent.bytes;
  std::string budget = budget_bytes_ == UINT64_MAX ? std::string("no budget") : "a " + Mib(budget_bytes_) + " budget";
  return std::to_string(n_fixed_) + " of " + std::to_string(n_layers()) + " layers fixed (" + Mib(fixed) + ") + " +
         std::to_string(slots_.size()) + " preload buffers of " + Mib(index_.max_extent_bytes()) + " (window " +
         std::to_string(window_) + "), " + Mib(allocated_bytes_) + " of " + budget;
}

}  // namespace weir::m2cache
