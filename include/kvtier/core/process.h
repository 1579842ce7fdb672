// OwningProcess: the process an object belongs to.
//
// fork() copies a process's memory but only the thread that called it. An object that owns
// threads, locks or kernel objects (io_uring rings, registered buffers, mapped files) is, in a
// forked child, a copy whose threads are gone and whose locks may stay held by threads that do
// not exist there; its rings and registrations are still the parent's. Such an object records
// the process that made it, refuses every call from another process before it takes a lock,
// and releases nothing when destroyed there (abandon()): a forked child opens its own.
//
// Thread-safety: immutable after construction; safe for concurrent use.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string_view>
#include <utility>

#include "kvtier/core/status.h"

namespace kvtier {

class OwningProcess {
 public:
  OwningProcess() noexcept;

  // Whether the calling process is the one that made the object.
  bool here() const noexcept;
  // OK here; in another process kInvalidArgument: "<what> was opened by process P, and this
  // is process C (a forked child): open one in this process".
  Status check(std::string_view what) const;
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_;
};

namespace detail {
// Keeps the object `owner` points to alive until the process exits, unreported as a leak.
void abandon_owner(std::shared_ptr<void> owner) noexcept;
}  // namespace detail

// In a process that does not own `*p` (a forked child): drops `p` without destroying what it
// points to, whose destructor would wait for threads that do not exist in this process or
// release what its owner still uses. Nothing is freed; the process's exit reclaims it.
template <typename T>
void abandon(std::shared_ptr<T>& p) noexcept {
  if (p) detail::abandon_owner(std::exchange(p, nullptr));
}
template <typename T>
void abandon(std::unique_ptr<T>& p) noexcept {
  if (p) detail::abandon_owner(std::shared_ptr<T>(p.release(), [](T*) {}));
}

}  // namespace kvtier
