// Status and Result<T>: the one error vocabulary of kvtier.
//
// Every fallible operation on the I/O path returns a Status or a Result<T>. Both are
// [[nodiscard]]: dropping one is a compile error under -Werror=unused-result, and a deliberate
// ignore is spelled `.ignore_error()`.
//
// The code tells the caller what to do with a failure:
//   kNotFound            a miss: recompute the page.
//   kCorrupt             the stored page is damaged or foreign: drop it, treat as a miss.
//   kUnavailable         transient storage fault (EIO, a server that does not answer).
//   kDeadlineExceeded    a deadline passed (DEADLINE_EXCEEDED).
//   kCancelled           the caller cancelled the operation.
//   kInvalidArgument     a caller bug: wrong size, unregistered memory, malformed key.
//   kPermissionDenied    the storage refused access (EACCES, EPERM, EROFS).
//   kResourceExhausted   no space, no descriptors, no memory (ENOSPC, EMFILE, ENOMEM).
//   kAlreadyExists       the object exists (EEXIST) where it must not.
//   kUnsupported         the backend or filesystem cannot do this (ENOSYS, EOPNOTSUPP).
//   kInternal            a kvtier bug or an unclassified error.
// `retryable()` says whether the same call may succeed if repeated (EINTR, EAGAIN, EMFILE...).
//
// Thread-safety: Status and Result are values; distinct objects may be used from distinct
// threads, a shared const object from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kvtier {

enum class StatusCode : uint8_t {
  kOk = 0,
  kNotFound,
  kCorrupt,
  kUnavailable,
  kDeadlineExceeded,
  kCancelled,
  kInvalidArgument,
  kPermissionDenied,
  kResourceExhausted,
  kAlreadyExists,
  kUnsupported,
  kInternal,
};

// "NOT_FOUND", "CORRUPT", ... (stable; used in logs, JSON and Python).
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  // OK. Costs one null pointer; copying an OK status allocates nothing.
  Status() noexcept = default;
  Status(StatusCode code, std::string message, bool retryable = false);

  static Status ok_status() noexcept { return Status(); }

  bool ok() const noexcept { return rep_ == nullptr; }
  StatusCode code() const noexcept { return rep_ ? rep_->code : StatusCode::kOk; }
  std::string_view message() const noexcept {
    return rep_ ? std::string_view(rep_->message) : std::string_view();
  }
  bool retryable() const noexcept { return rep_ && rep_->retryable; }

  // "OK" or "<CODE>: <message>" (with " [retryable]" when it is).
  std::string to_string() const;

  // A status with `context + ": "` prepended to the message; same code and retryability.
  Status with_context(std::string_view context) const;

  // Spells out that an error is deliberately dropped.
  void ignore_error() const noexcept {}

  friend bool operator==(const Status& a, const Status& b) noexcept {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    bool retryable;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

inline Status ok_status() noexcept {
  return Status();
}
Status not_found_error(std::string message);
Status corrupt_error(std::string message);
Status unavailable_error(std::string message, bool retryable = true);
Status deadline_exceeded_error(std::string message);
Status cancelled_error(std::string message);
Status invalid_argument_error(std::string message);
Status permission_denied_error(std::string message);
Status resource_exhausted_error(std::string message, bool retryable = false);
Status already_exists_error(std::string message);
Status unsupported_error(std::string message);
Status internal_error(std::string message);

// The one errno -> Status mapping of the code base. `op` names the system call or operation,
// `path` what it acted on; offset/length are printed when not kNoPos.
inline constexpr uint64_t kNoPos = ~uint64_t{0};
Status errno_status(int err, std::string_view op, std::string_view path = {},
                    uint64_t offset = kNoPos, uint64_t length = kNoPos);

// Result<T>: a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>, "Result<Status> is meaningless");

 public:
  // Implicit from a value and from an error, so `return value;` and `return status;` both read
  // naturally. Constructing from an OK status is a bug and becomes kInternal.
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status)                          // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? Status(StatusCode::kInternal, "Result built from an OK Status")
                            : std::move(status)) {}

  bool ok() const noexcept { return value_.has_value(); }
  // OK when a value is held.
  const Status& status() const& noexcept { return status_; }
  Status status() && noexcept { return std::move(status_); }

  // REQUIRES: ok().
  T& value() & noexcept { return *value_; }
  const T& value() const& noexcept { return *value_; }
  T&& value() && noexcept { return std::move(*value_); }
  T& operator*() & noexcept { return *value_; }
  const T& operator*() const& noexcept { return *value_; }
  T&& operator*() && noexcept { return std::move(*value_); }
  T* operator->() noexcept { return &*value_; }
  const T* operator->() const noexcept { return &*value_; }

  T value_or(T fallback) const& { return value_ ? *value_ : std::move(fallback); }

  void ignore_error() const noexcept {}

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kvtier

#define KVTIER_CONCAT_INNER_(a, b) a##b
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define KVTIER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::kvtier::Status kvtier_status_ = (expr);        \
    if (!kvtier_status_.ok()) return kvtier_status_; \
  } while (false)

// `KVTIER_ASSIGN_OR_RETURN(auto x, f());` declares/assigns the value or returns the error.
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(kvtier_result_, __LINE__), lhs, expr)
#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()
