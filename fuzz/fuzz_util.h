// Helpers shared by the libFuzzer targets: a per-process scratch directory for the readers that
// take a path (the llama2.c and safetensors loaders look for files beside the model, the trace
// reader reads with stdio), and a splitter for inputs that carry more than one file.
//
// Thread safety: none; libFuzzer calls a target from one thread.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

namespace weir::fuzz {

// A directory of its own for this process, in /dev/shm when it exists (tmpfs: no disk writes).
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/weir-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  // Removed (with the few files the targets write) when the fuzzer exits normally.
  static const bool cleanup = std::atexit([] {
    const std::string& d = ScratchDir();
    for (const char* f : {"config.json", "model.safetensors", "model.bin", "tokenizer.bin",
                          "fuzz.wtrace"}) {
      ::unlink((d + "/" + f).c_str());
    }
    ::rmdir(d.c_str());
  }) == 0;
  (void)cleanup;
  return dir;
}

// Writes `bytes` to ScratchDir()/name (replacing it) and returns the path.
inline std::string WriteScratch(const std::string& name, std::string_view bytes) {
  std::string path = ScratchDir() + "/" + name;
  ::unlink(path.c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

inline void RemoveScratch(const std::string& name) {
  ::unlink((ScratchDir() + "/" + name).c_str());
}

// Separates the files of a multi-file input (config.json from the weights, a checkpoint from its
// tokenizer). Seeds use it too (scripts/fuzz-seeds); libFuzzer finds it through its dictionary.
inline constexpr std::string_view kNextFile = "\n@@weir-fuzz-next-file@@\n";

// Splits an input at the first occurrence of `sep` into (before, after); without one, the
// whole input is `before`. Seeds are written with the same separator (scripts/fuzz-seeds).
inline std::pair<std::string_view, std::string_view> SplitOnce(std::string_view in,
                                                               std::string_view sep) {
  size_t at = in.find(sep);
  if (at == std::string_view::npos) return {in, {}};
  return {in.substr(0, at), in.substr(at + sep.size())};
}

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace weir::fuzz
