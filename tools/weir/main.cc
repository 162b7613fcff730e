// weir: one binary, git-style subcommands. Each subcommand lives in tools/<name>/ and exposes
// `int <Name>Main(int argc, char** argv)` (argv[0] is the subcommand name). Exit codes: 0 ok,
// 1 runtime error, 2 usage error.
#include <cstdio>
#include <cstring>
#include <string>

#include "common/commands.h"

namespace {

struct Command {
  const char* name;
  int (*main)(int, char**);
  const char* help;
};

const Command kCommands[] = {
#define WEIR_COMMAND(name, fn, help) {name, weir::tools::fn, help},
#include "common/command_list.inc"
#undef WEIR_COMMAND
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "weir: run LLMs larger than the memory they are given.\n\n"
               "usage: weir <command> [options]   (weir <command> --help for its options)\n\n"
               "commands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    PrintUsage(stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("weir 0.1.0\n");
    return 0;
  }
  for (const auto& c : kCommands) {
    if (cmd == c.name) return c.main(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "weir: unknown command '%s'\n\n", cmd.c_str());
  PrintUsage(stderr);
  return 2;
}
