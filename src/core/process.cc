#include "kvtier/core/process.h"

#include <fmt/format.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace kvtier {

OwningProcess::OwningProcess() noexcept : pid_(::getpid()) {}

bool OwningProcess::here() const noexcept {
  return ::getpid() == pid_;
}

Status OwningProcess::check(std::string_view what) const {
  const pid_t now = ::getpid();
  if (now == pid_) return ok_status();
  return invalid_argument_error(
      fmt::format("{} was opened by process {}, and this is process {} (a forked child): its "
                  "threads and locks stayed in the parent; open one in this process",
                  what, pid_, now));
}

namespace detail {

void abandon_owner(std::shared_ptr<void> owner) noexcept {
  // A copy of the reference that is never destroyed: the object outlives every other one.
  auto* kept = new (std::nothrow) std::shared_ptr<void>(std::move(owner));
#if defined(__SANITIZE_ADDRESS__)
  if (kept != nullptr) __lsan_ignore_object(kept);
#else
  (void)kept;
#endif
  // Without memory for the copy, `owner` is destroyed here after all; a child out of memory
  // has no better choice.
}

}  // namespace detail
}  // namespace kvtier
