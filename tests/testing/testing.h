// Helpers shared by the test suites: where shared/ is, a scratch directory per test, running
// the weir binary, reading small files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weir::testing {

// ../shared (or $WEIR_SHARED). Tests that need a real model skip when the file is absent.
std::string SharedDir();
std::string SharedPath(const std::string& rel);
bool FileExists(const std::string& path);
// The built weir binary ($WEIR_BIN or the build's bin/weir).
std::string WeirBin();
// Debian's python3 with numpy, for oracle scripts; the repository root.
std::string Python();
std::string SourceDir();
// A fresh empty directory under /tmp, removed by the OS eventually; unique per call.
std::string TempDir();

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `cmd` with /bin/sh, capturing stdout and stderr.
CommandResult RunCommand(const std::string& cmd);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& bytes);

// max |a - b| over max |b|: the error of a relative to the range of b; infinity when the sizes
// differ.
double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b);

// The smallest --memory at which `weir run -m PACK -p x -n 1 -c 64 --memory-scope weights --block
// 4KiB --prefetch -1` runs, found from its refusals (the first names the minimum without the
// session, the second with it); 0 when no budget was found in four tries.
uint64_t WeirMinimumBudget(const std::string& pack);

}  // namespace weir::testing
