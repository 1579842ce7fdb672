// Which locations can hang, and how a location is asked whether it answers.
//
// A base is isolated (its I/O runs on the guard's threads, under a deadline) when its
// filesystem is one whose calls can block for as long as a server is gone: network and FUSE
// filesystems, told apart by statfs. A probe creates, writes and removes a file there, each
// step a call to the server.
#pragma once

#include <string>
#include <string_view>

#include "kvtier/core/status.h"

namespace kvtier::guard {

// Whether a base's I/O is isolated from the caller, and why ("on (auto: fuse)").
struct Isolation {
  bool on = false;
  std::string why;
};
// `mode` is "auto" (network and FUSE filesystems, by statfs), "on" or "off".
Result<Isolation> decide_isolation(const std::string& dir, std::string_view mode);

// Creates, writes and removes a file in `dir`: each step goes to the server.
Status probe_once(const std::string& dir);

// A probe that got an answer from the server: success, or a refusal that is not a fault of
// the connection (a read-only, full or forbidden location still answers).
bool answered(const Status& st);

}  // namespace kvtier::guard
