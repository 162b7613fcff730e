// Shared command-line plumbing for the subcommands: parsing with the project's exit codes,
// error printing, a progress bar on stderr, JSON output. Tools print; libraries never do.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace weir::tools {

// Exit codes of every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// Parses argv (argv[0] is the subcommand name). Returns -1 when the command should go on,
// otherwise the exit code to return at once: 0 after --help, 2 after a usage error.
int Parse(CLI::App& app, int argc, char** argv);

// Prints "weir <command>: error: <status>" on stderr and returns kExitError.
int Fail(const std::string& command, const Status& status);

// The last component of a path ("a/b/model.gguf" -> "model.gguf").
std::string BaseName(const std::string& path);

// Prints a JSON document on stdout (pretty, one trailing newline).
void PrintJson(const nlohmann::json& doc);

// A single-line progress bar on stderr, redrawn at most ~10 times a second; silent when
// disabled (e.g. --json or a non-terminal stderr with --no-progress).
class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total, bool enabled);
  ~ProgressBar();
  void Update(uint64_t done, const std::string& suffix = "");
  void Finish(const std::string& suffix = "");

 private:
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace weir::tools
