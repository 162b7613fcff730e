// Entry points of the subcommands listed in command_list.inc.
#pragma once

namespace weir::tools {
#define WEIR_COMMAND(name, fn, help) int fn(int argc, char** argv);
#include "common/command_list.inc"
#undef WEIR_COMMAND
}  // namespace weir::tools
