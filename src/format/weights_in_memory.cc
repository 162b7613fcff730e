#include "format/weights_in_memory.h"

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "base/anon_region.h"
#include "base/checked_math.h"
#include "kernels/tiled.h"

namespace weir::format {
namespace {

constexpr uint64_t kTensorAlign = 64;

struct RegionBacking : Backing {
  explicit RegionBacking(AnonRegion r) : region(std::move(r)) {}
  AnonRegion region;
};

// Offsets of each distinct source pointer in the region, in file order; false on overflow.
bool Layout(const ModelFile& file, std::map<const void*, uint64_t>* offsets, uint64_t* total) {
  uint64_t end = 0;
  for (const std::string& name : file.tensor_order) {
    const TensorView* v = file.Find(name);
    if (!v || !v->data || offsets->count(v->data)) continue;
    const uint64_t offset = (end + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
    if (offset < end || !CheckedAdd(offset, static_cast<uint64_t>(v->nbytes()), &end)) return false;
    (*offsets)[v->data] = offset;
  }
  // Tensors missing from tensor_order (a reader that added one) still get a place.
  for (const auto& [name, v] : file.tensors) {
    if (!v.data || offsets->count(v.data)) continue;
    const uint64_t offset = (end + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
    if (offset < end || !CheckedAdd(offset, static_cast<uint64_t>(v.nbytes()), &end)) return false;
    (*offsets)[v.data] = offset;
  }
  *total = end;
  return true;
}

}  // namespace

uint64_t WeightBytesInMemory(const ModelFile& file) {
  std::map<const void*, uint64_t> offsets;
  uint64_t total = 0;
  return Layout(file, &offsets, &total) ? total : UINT64_MAX;
}

bool AutoPlacementCopies(uint64_t weight_bytes, std::optional<uint64_t> available_bytes) {
  return available_bytes && weight_bytes <= *available_bytes / 4 * 3;
}

bool IsLinearWeight(const std::string& name) {
  if (name == "output.weight") return true;
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return false;
  const std::string op = name.substr(dot + 1);
  for (const char* k : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                        "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
                        "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
    if (op == k) return true;
  }
  return false;
}

namespace {

// The 2-D view that tiling sees: a stack of experts [n_expert, rows, cols] is tiled as
// [n_expert * rows, cols] when each expert's rows are whole groups of 16, so that every group
// lies inside one expert and an expert's slice (model/moe.h ExpertSlice) is itself tiled.
// Anything else is returned unchanged (CanTile then decides).
TensorView TilingView(const TensorView& v) {
  if (v.shape.ndim != 3 || v.shape[1] % kernels::kTileRows != 0) return v;
  TensorView flat = v;
  flat.shape = Shape{v.shape[0] * v.shape[1], v.shape[2]};
  return flat;
}

}  // namespace

Status CopyWeightsToMemory(ModelFile* file, bool tile_linear, ThreadPool* pool) {
  std::map<const void*, uint64_t> offsets;
  uint64_t total = 0;
  if (!Layout(*file, &offsets, &total) || total > SIZE_MAX) {
    return Status::InvalidArgument(file->path + ": tensor sizes overflow");
  }
  if (total == 0) return Status::Ok();
  Result<AnonRegion> made = AnonRegion::Create(static_cast<size_t>(total));
  if (!made.ok()) return made.status().WithContext(file->path + ": copying the weights into memory");
  AnonRegion region = std::move(made).value();

  // Bytes shared by several names are tiled only if every one of them is a linear weight.
  std::map<const void*, bool> tile;
  for (const auto& [name, v] : file->tensors) {
    if (!v.data) continue;
    const bool ok = tile_linear && IsLinearWeight(name) && kernels::CanTile(TilingView(v));
    auto [it, fresh] = tile.emplace(v.data, ok);
    if (!fresh) it->second = it->second && ok;
  }

  // The distinct source ranges in file order; copied (or tiled) in parallel, each source range
  // released as soon as it is copied.
  struct Job {
    TensorView src;
    uint64_t offset;
    bool tile;
  };
  std::vector<Job> jobs;
  std::set<const void*> added;
  auto add = [&](const TensorView& v) {
    if (!v.data || !added.insert(v.data).second) return;
    jobs.push_back(Job{v, offsets.at(v.data), tile.at(v.data)});
  };
  for (const std::string& name : file->tensor_order) {
    if (const TensorView* v = file->Find(name)) add(*v);
  }
  for (const auto& [name, v] : file->tensors) add(v);
  struct Copy {
    const std::vector<Job>* jobs;
    AnonRegion* region;
    const ModelFile* file;
    void Run(size_t b, size_t e) const {
      for (size_t i = b; i < e; ++i) {
        const Job& j = (*jobs)[i];
        if (j.tile) {
          kernels::TileRows(TilingView(j.src), region->data() + j.offset);
        } else {
          std::memcpy(region->data() + j.offset, j.src.data, j.src.nbytes());
        }
        for (const auto& bk : file->backing) bk->DoneReading(j.src.data, j.src.nbytes());
      }
    }
  } copy{&jobs, &region, file};
  ParallelForDynamic(pool, jobs.size(), [&copy](size_t b, size_t e, int) { copy.Run(b, e); }, 1);

  for (auto& [name, v] : file->tensors) {
    if (!v.data) continue;
    if (tile.at(v.data)) v.layout = Layout::kTiled16;
    v.data = region.data() + offsets.at(v.data);
  }
  file->backing.clear();
  file->backing.push_back(std::make_shared<RegionBacking>(std::move(region)));
  file->weights_in_memory = true;
  return Status::Ok();
}

}  // namespace weir::format
