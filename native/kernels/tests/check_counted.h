// CHECK(cond, printf-style message) for the kernel tests, which make many thousands of checks:
// every check is counted (the summary line reports both numbers) and only the first 40
// failures are printed. Plain C++, no framework: ctest runs the tests.
#pragma once
#include <cstdio>

static int g_fail = 0, g_checks = 0;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    g_checks++;                                            \
    if (!(cond)) {                                         \
      g_fail++;                                            \
      if (g_fail < 40) {                                   \
        std::printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
        std::printf(__VA_ARGS__);                          \
        std::printf("\n");                                 \
      }                                                    \
    }                                                      \
  } while (0)
