// WEIR_CHECK: invariants that only a bug can break. Never use it on a value that came from a
// file, a flag or a request (return a Status instead). A failed check prints and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define WEIR_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#define WEIR_DCHECK(cond) WEIR_CHECK(cond)
