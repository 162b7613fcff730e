// weir chat (placeholder until the chat loop lands).
#include "common/cli.h"
#include "common/commands.h"

namespace weir::tools {
int ChatMain(int, char**) { return Fail("chat", Status::Unsupported("not yet")); }
}  // namespace weir::tools
