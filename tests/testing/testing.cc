#include "testing/testing.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

std::string TempDir() {
  static std::atomic<int> counter{0};
  char tmpl[256];
  std::snprintf(tmpl, sizeof(tmpl), "/tmp/weir_test_%d_%d_XXXXXX", static_cast<int>(getpid()),
                counter++);
  char* dir = mkdtemp(tmpl);
  return dir ? dir : "/tmp";
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

}  // namespace weir::testing
