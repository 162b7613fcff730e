#include "testing/testing.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <regex>
#include <sstream>
#include <vector>

namespace weir::testing {

std::string SharedDir() {
  const char* env = std::getenv("WEIR_SHARED");
  return env && *env ? env : WEIR_DEFAULT_SHARED;
}
std::string SharedPath(const std::string& rel) { return SharedDir() + "/" + rel; }
bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}
std::string WeirBin() {
  const char* env = std::getenv("WEIR_BIN");
  return env && *env ? env : WEIR_DEFAULT_BIN;
}
std::string Python() { return WEIR_DEFAULT_PYTHON; }
std::string SourceDir() { return WEIR_SOURCE_DIR; }

namespace {
// The directories TempDir made in this process, removed when it exits normally (a crashed test
// leaves its files for a look; WEIR_KEEP_TEST_DIRS=1 keeps them always).
class TempDirs {
 public:
  ~TempDirs() {
    const char* keep = std::getenv("WEIR_KEEP_TEST_DIRS");
    if (keep && *keep && std::string(keep) != "0") return;
    std::error_code ec;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ec);
  }
  void Add(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(dir);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> dirs_;
};
TempDirs& Made() {
  static TempDirs dirs;
  return dirs;
}
}  // namespace

std::string TempDir() {
  static std::atomic<int> counter{0};
  char tmpl[256];
  std::snprintf(tmpl, sizeof(tmpl), "/tmp/weir_test_%d_%d_XXXXXX", static_cast<int>(getpid()),
                counter++);
  char* dir = mkdtemp(tmpl);
  if (dir == nullptr) return "/tmp";
  Made().Add(dir);
  return dir;
}

CommandResult RunCommand(const std::string& cmd) {
  std::string dir = TempDir();
  std::string out = dir + "/stdout", err = dir + "/stderr";
  std::string full = "(" + cmd + ") >" + out + " 2>" + err;
  int rc = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(b[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return max_abs > 0 ? max_diff / max_abs : 0;
}

uint64_t WeirMinimumBudget(const std::string& pack) {
  uint64_t minimum = 1024;
  for (int tries = 0; tries < 4; ++tries) {
    const CommandResult r = RunCommand(WeirBin() + " run -m " + pack + " -p x -n 1 -c 64 --memory " +
                                       std::to_string(minimum) +
                                       " --memory-scope weights --block 4KiB --prefetch -1");
    if (r.exit_code == 0) return minimum;
    std::smatch m;
    if (!std::regex_search(r.err, m, std::regex("minimum ([0-9.]+) KiB"))) return 0;
    // The message rounds to 0.01 KiB: the exact minimum may be up to 0.005 KiB above it.
    minimum = static_cast<uint64_t>(std::ceil((std::stod(m[1].str()) + 0.005) * 1024));
  }
  return 0;
}

}  // namespace weir::testing
