// Overflow-safe arithmetic for sizes and offsets read from files. Every reader uses these before
// it trusts a count, a dimension or an offset.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weir {

// Returns false on overflow; *out is then unspecified.
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// True when [offset, offset + length) lies inside [0, size).
inline bool RangeInside(uint64_t offset, uint64_t length, uint64_t size) {
  uint64_t end;
  return CheckedAdd(offset, length, &end) && end <= size;
}

}  // namespace weir
