// UnitId: the 64-bit key of one cached weight unit (a neuron bundle, a column extent, a whole
// tensor slice). The storage layer treats it as opaque; the packing below is the convention the
// engine uses so that a unit's layer can be read back (e.g. to pick its cache partition).
//
//   bits 63..48  layer  (16 bits, < 65536)
//   bits 47..40  kind   (8 bits: which tensor or bundle type; defined by the caller)
//   bits 39..0   index  (40 bits: neuron / channel / extent number)
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "base/check.h"

namespace weir::storage {

using UnitId = uint64_t;

inline constexpr uint32_t kUnitLayerLimit = 1u << 16;
inline constexpr uint32_t kUnitKindLimit = 1u << 8;
inline constexpr uint64_t kUnitIndexLimit = 1ull << 40;

// True when (layer, kind, index) fits the packing. Callers validate sizes that came from a file
// with this before building ids (MakeUnitId treats a misfit as a bug).
constexpr bool UnitIdFits(uint64_t layer, uint64_t kind, uint64_t index) {
  return layer < kUnitLayerLimit && kind < kUnitKindLimit && index < kUnitIndexLimit;
}

inline UnitId MakeUnitId(uint32_t layer, uint32_t kind, uint64_t index) {
  WEIR_CHECK(UnitIdFits(layer, kind, index));
  return (static_cast<uint64_t>(layer) << 48) | (static_cast<uint64_t>(kind) << 40) | index;
}

constexpr uint32_t UnitLayer(UnitId id) { return static_cast<uint32_t>(id >> 48); }
constexpr uint32_t UnitKind(UnitId id) { return static_cast<uint32_t>((id >> 40) & 0xff); }
constexpr uint64_t UnitIndex(UnitId id) { return id & (kUnitIndexLimit - 1); }

}  // namespace weir::storage
