// main() of every test binary: GoogleTest's, except when the binary was started as a child
// process of a test (child_process.h), which runs that child's body instead.
#include <gtest/gtest.h>

#include "src/testing/child_process.h"

int main(int argc, char** argv) {
  int code = 0;
  if (kvtier::testing::run_child_if_asked(argc, argv, &code)) return code;
  // Death tests too start their child by exec, not by a fork of a process with threads.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
