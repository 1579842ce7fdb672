#include "kvtier/core/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

namespace kvtier {
namespace {

TEST(Status, DefaultIsOkAndCarriesNothing) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_FALSE(s.retryable());
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(Status, ErrorKeepsCodeMessageAndRetryability) {
  Status s = unavailable_error("disk went away", true);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "disk went away");
  EXPECT_TRUE(s.retryable());
  EXPECT_EQ(s.to_string(), "UNAVAILABLE: disk went away [retryable]");
}

TEST(Status, WithContextPrefixesAndKeepsTheCode) {
  Status s = not_found_error("no page").with_context("batch_get page 3");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "batch_get page 3: no page");
  EXPECT_TRUE(ok_status().with_context("x").ok());
}

TEST(Status, ErrnoMappingClassifiesAndNamesPathOffsetLength) {
  Status s = errno_status(ENOSPC, "pwritev", "/data/p", 4096, 8192);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(s.retryable());
  EXPECT_NE(s.message().find("pwritev '/data/p' offset=4096 length=8192"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("errno 28"), std::string::npos) << s.message();

  EXPECT_EQ(errno_status(ENOENT, "open").code(), StatusCode::kNotFound);
  EXPECT_EQ(errno_status(EACCES, "open").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(errno_status(EROFS, "open").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(errno_status(EMFILE, "open").code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(errno_status(EMFILE, "open").retryable());
  EXPECT_EQ(errno_status(EINTR, "read").code(), StatusCode::kUnavailable);
  EXPECT_TRUE(errno_status(EAGAIN, "read").retryable());
  EXPECT_EQ(errno_status(EIO, "read").code(), StatusCode::kUnavailable);
  EXPECT_EQ(errno_status(ETIMEDOUT, "connect").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(errno_status(EINVAL, "read").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(errno_status(EEXIST, "link").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(errno_status(EOPNOTSUPP, "open").code(), StatusCode::kUnsupported);
  EXPECT_EQ(errno_status(ECANCELED, "read").code(), StatusCode::kCancelled);
  EXPECT_EQ(errno_status(12345, "x").code(), StatusCode::kInternal);
}

TEST(Status, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    EXPECT_NE(status_code_name(static_cast<StatusCode>(c)), "UNKNOWN") << c;
  }
}

Result<int> half(int v) {
  if (v % 2 != 0) return invalid_argument_error("odd");
  return v / 2;
}

Result<int> quarter(int v) {
  KVTIER_ASSIGN_OR_RETURN(int h, half(v));
  return half(h);
}

TEST(Result, HoldsAValueOrAnError) {
  Result<int> ok = half(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 4);
  Result<int> bad = half(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(Result, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quarter(3).status().code(), StatusCode::kInvalidArgument);
}

TEST(Result, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(Result, BuiltFromOkStatusIsAnInternalError) {
  Result<int> r = ok_status();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace kvtier
