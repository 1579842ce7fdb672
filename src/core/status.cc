#include "kvtier/core/status.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace kvtier {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kCorrupt:
      return "CORRUPT";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kUnsupported:
      return "UNSUPPORTED";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message, bool retryable) {
  if (code == StatusCode::kOk) return;
  rep_ = std::make_shared<const Rep>(Rep{code, retryable, std::move(message)});
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return fmt::format("{}: {}{}", status_code_name(code()), message(),
                     retryable() ? " [retryable]" : "");
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code(), fmt::format("{}: {}", context, message()), retryable());
}

Status not_found_error(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
Status corrupt_error(std::string m) {
  return {StatusCode::kCorrupt, std::move(m)};
}
Status unavailable_error(std::string m, bool retryable) {
  return {StatusCode::kUnavailable, std::move(m), retryable};
}
Status deadline_exceeded_error(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m), true};
}
Status cancelled_error(std::string m) {
  return {StatusCode::kCancelled, std::move(m)};
}
Status invalid_argument_error(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
Status permission_denied_error(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
Status resource_exhausted_error(std::string m, bool retryable) {
  return {StatusCode::kResourceExhausted, std::move(m), retryable};
}
Status already_exists_error(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}
Status unsupported_error(std::string m) {
  return {StatusCode::kUnsupported, std::move(m)};
}
Status internal_error(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}

namespace {

struct ErrnoClass {
  StatusCode code;
  bool retryable;
};

ErrnoClass classify_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return {StatusCode::kNotFound, false};
    case EACCES:
    case EPERM:
    case EROFS:
      return {StatusCode::kPermissionDenied, false};
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return {StatusCode::kResourceExhausted, false};
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOBUFS:
      return {StatusCode::kResourceExhausted, true};
    case EINTR:
    case EAGAIN:
    case EBUSY:
    case ESTALE:
    case ECONNRESET:
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENOTCONN:
    case ECONNABORTED:
    case ENETDOWN:
    case ENETRESET:
    case EHOSTDOWN:
      return {StatusCode::kUnavailable, true};
    case ESHUTDOWN:  // a network filesystem's client cut off (ceph-fuse until remounted)
      return {StatusCode::kUnavailable, false};
    case EIO:
    case ENXIO:
    case ENODEV:
      return {StatusCode::kUnavailable, false};
    case ETIMEDOUT:
      return {StatusCode::kDeadlineExceeded, true};
    case ECANCELED:
      return {StatusCode::kCancelled, false};
    case EEXIST:
    case ENOTEMPTY:
      return {StatusCode::kAlreadyExists, false};
    case ENOSYS:
    case EOPNOTSUPP:
    case EXDEV:
      return {StatusCode::kUnsupported, false};
    case EINVAL:
    case EBADF:
    case EFAULT:
    case EISDIR:
    case ENAMETOOLONG:
    case ELOOP:
    case ERANGE:
    case EOVERFLOW:
      return {StatusCode::kInvalidArgument, false};
    default:
      return {StatusCode::kInternal, false};
  }
}

}  // namespace

Status errno_status(int err, std::string_view op, std::string_view path, uint64_t offset,
                    uint64_t length) {
  const ErrnoClass c = classify_errno(err);
  std::string msg(op);
  if (!path.empty()) msg += fmt::format(" '{}'", path);
  if (offset != kNoPos) msg += fmt::format(" offset={}", offset);
  if (length != kNoPos) msg += fmt::format(" length={}", length);
  char buf[128];
  // GNU strerror_r returns the message (maybe not in buf).
  const char* text = strerror_r(err, buf, sizeof(buf));
  msg += fmt::format(": {} (errno {})", text, err);
  return Status(c.code, std::move(msg), c.retryable);
}

}  // namespace kvtier
