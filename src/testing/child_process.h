// Child processes of a test: a named body of the test binary, run in a process that starts
// from exec (the binary run again), never from a fork of the test's image.
//
// A forked copy of a process with threads holds every lock those threads held at the fork
// (the allocator's among them, under ASan) with no thread left to release it: its first malloc
// can hang for good, and does on a busy machine. An exec'd child starts with one thread and a
// heap of its own; it has nothing of the parent's but its arguments, the environment and the
// pipe it reports on. So a child's body is a function of its arguments, registered by name:
//
//   KVTIER_CHILD(append_pages, args) {        // int (const ChildArgs& args)
//     auto s = open_at(args.str(0));
//     ...
//     child_event('b');                       // one byte to the parent
//     return 0;                               // the child's exit code
//   }
//
//   Child w = Child::start("append_pages", {dir.path()});
//   while (w.next() == 'b') ...
//   EXPECT_EQ(w.wait(), 0);
//
// The test binary's main() (test_main.cc) runs the body when started as a child. A body never
// uses gtest's assertions (nothing reports them): it returns a code the parent checks, and an
// exception it throws ends it with kChildThrew.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/unique_fd.h"
#include "src/testing/test_util.h"

namespace kvtier::testing {

// The exit code of a child whose body threw.
inline constexpr int kChildThrew = 9;

// A child's arguments, as Child::start was given them.
class ChildArgs {
 public:
  explicit ChildArgs(std::vector<std::string> args) : args_(std::move(args)) {}
  size_t size() const { return args_.size(); }
  // Argument i; throws std::out_of_range past the end.
  const std::string& str(size_t i) const { return args_.at(i); }
  // Argument i as a number; throws std::invalid_argument when it is not one.
  uint64_t u64(size_t i) const;
  int64_t i64(size_t i) const;

 private:
  std::vector<std::string> args_;
};

using ChildBody = int (*)(const ChildArgs&);

// Registers `body` under `name` (KVTIER_CHILD does, before main). Returns true.
bool register_child(const char* name, ChildBody body);

// Defines and registers a child body: `KVTIER_CHILD(name, args) { ...; return code; }`.
#define KVTIER_CHILD(name, args)                                      \
  int kvtier_child_##name(const ::kvtier::testing::ChildArgs& args);  \
  [[maybe_unused]] const bool kvtier_child_registered_##name =        \
      ::kvtier::testing::register_child(#name, &kvtier_child_##name); \
  int kvtier_child_##name(const ::kvtier::testing::ChildArgs& args)

// In a child: sends one byte to the parent (Child::next()). Without a parent listening (the
// parent gone), it is dropped.
void child_event(char event);

// In main(): when argv names a child body (the binary was started by Child::start), runs it
// and returns true with its exit code in *code; otherwise returns false.
bool run_child_if_asked(int argc, char** argv, int* code);

// A running child. Destroying it kills and reaps the child if it is still running, so no
// child outlives its test, whichever assertion ends it.
class Child {
 public:
  static constexpr int kEnd = 0;                // the child is gone (or closed its pipe)
  static constexpr int kDeadlineExceeded = -1;  // nothing came within the ceiling

  // Starts the body registered as `name` with `args` (posix_spawn of /proc/self/exe). A start
  // that fails is a test failure, and the Child is then !valid() (next() gives kEnd, wait()
  // -1).
  static Child start(std::string_view name, std::vector<std::string> args = {});

  Child() = default;
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  bool valid() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // The child's next event (child_event()), kEnd or kDeadlineExceeded. The ceiling only fails
  // a child that hangs; it is not how long anything is expected to take.
  int next(std::chrono::milliseconds ceiling = kHungCeiling);
  // Sends `signal` to the child (if it has not been reaped yet).
  void kill(int signal);
  // Waits for the child to end: its exit code, 128 + the signal that ended it, or -1.
  int wait();

 private:
  void reset();

  pid_t pid_ = -1;
  UniqueFd events_;  // the read end of the child's event pipe
};

}  // namespace kvtier::testing
