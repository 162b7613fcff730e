// Helpers shared by the storage tests: a temp file of random bytes and its reference copy, and
// random record selections.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace weir::storage::test {

struct RandomFile {
  std::string path;
  std::string bytes;  // the reference: what a plain read of the file returns
};

// A file of `size` pseudo-random bytes (seeded) in a fresh temp directory.
inline RandomFile MakeRandomFile(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RandomFile f;
  f.bytes.resize(size);
  for (size_t i = 0; i < size; ++i) f.bytes[i] = static_cast<char>(rng() & 0xff);
  f.path = weir::testing::TempDir() + "/weights.bin";
  weir::testing::WriteFile(f.path, f.bytes);
  return f;
}

// Record slots 0 .. n_records - 1, each kept with probability `keep` (seeded), ascending.
inline std::vector<int64_t> RandomSlots(int64_t n_records, double keep, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> slots;
  for (int64_t s = 0; s < n_records; ++s)
    if (std::uniform_real_distribution<double>(0, 1)(rng) < keep) slots.push_back(s);
  return slots;
}

}  // namespace weir::storage::test
