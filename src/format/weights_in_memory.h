// Copying a loaded model's weights out of its file into memory (WeightPlacement::kMemory).
//
// A decode step reads every weight byte once, so how the bytes are mapped matters: read in place
// from a file mapping they sit on 4 KiB pages, and the same kernels ran llama-1b Q4_0 at 32-33
// tok/s mapped against 38-41 copied into one anonymous region with transparent huge pages
// advised (docs/performance.md, "Weights in memory"; our reading of the cause: page walks, and
// hardware prefetchers that stop at each 4 KiB page boundary). llama.cpp likewise copies or repacks its CPU weights into
// its own buffers by default.
//
// The copy goes tensor by tensor in file order, and each source range is handed back to its
// backing as soon as it is copied (MappedFile drops those pages), so the process does not hold
// the weights twice at once.
#pragma once

#include <cstdint>
#include <optional>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/model_file.h"

namespace weir::format {

// Moves every tensor's bytes into one new anonymous region (each tensor 64-byte aligned; tensors
// sharing bytes stay shared), repoints the views, replaces file->backing with the region and sets
// file->weights_in_memory. With tile_linear, the Q8_0 / Q4_0 weights of the linear layers
// (IsLinearWeight) that kernels::CanTile accepts are written tiled (Layout::kTiled16) instead of
// copied (ModelFile::TiledTensorCount). On error `file` is unchanged.
// The tensors are copied in parallel on `pool` (nullptr: the calling thread).
Status CopyWeightsToMemory(ModelFile* file, bool tile_linear = false, ThreadPool* pool = nullptr);

// The projections only ever multiplied densely or by row gathers: attn_q/k/v/output, ffn_gate/
// up/down of every block, the expert stacks ffn_{gate,up,down}_exps (tiled when each expert's
// rows are whole groups of 16, so that each expert's slice is tiled too) and the output head
// ("output.weight"); not the token embedding, whose rows are looked up one by one, nor a
// mixture-of-experts router.
bool IsLinearWeight(const std::string& name);

// Bytes CopyWeightsToMemory would allocate (before rounding to huge pages).
uint64_t WeightBytesInMemory(const ModelFile& file);

// Whether kAuto copies: the weights take at most 3/4 of `available_bytes` (the memory the
// process could take now, base/memory_info.h). nullopt (unknown) keeps the mapping.
bool AutoPlacementCopies(uint64_t weight_bytes, std::optional<uint64_t> available_bytes);

}  // namespace weir::format
