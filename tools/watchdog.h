// The maintenance commands (stat, ls, verify, gc, clear) on a location that may hang: a system
// call on a network or FUSE filesystem can block for as long as its server is gone, and a
// process with a thread blocked there cannot even exit (the kernel reaps it only when the call
// ends). So the command runs in a child process, and the CLI waits for it only while the
// location answers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace kvtier::cli {

// The exit status when the location stopped answering (the command's child goes on alone).
inline constexpr int kExitNotAnswering = 3;

// Runs `command` and returns its exit status. On a FILE location with a deadline (`deadline_ms`
// given, else the URI's deadline_ms, else 10000; 0: none) it runs in a child process whose
// second thread asks each base directory (statfs, a call to the server) every quarter of the
// deadline; when none has answered for the deadline, this process prints why on stderr and
// returns kExitNotAnswering at once. The child goes on alone: a removal (gc, clear,
// verify --repair) ends once the location answers, never half done; its output then goes
// nowhere. The child's output is relayed where stdout or stderr is a pipe or socket (so that
// a reader sees its end when this process ends), and passed as it is otherwise (a terminal
// keeps its progress bar).
int run_watched(const char* name, const std::string& location,
                const std::optional<uint64_t>& deadline_ms, const std::function<int()>& command);

}  // namespace kvtier::cli
