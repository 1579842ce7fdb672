// What the end of an S3 request means: its status from the HTTP code and the server's error
// document, and which failures are worth another attempt (with backoff: s3_client.cc).
#pragma once

#include <curl/curl.h>

#include <string_view>

#include "kvtier/core/status.h"
#include "s3_client.h"

namespace kvtier::s3 {

// A transfer failure that another attempt may get past (a connection refused, reset or timed
// out).
bool retryable_curl(CURLcode c);
// An HTTP status that another attempt may get past (throttled, or the server's own failure).
bool retryable_http(long code);
// The status of a request that got an HTTP error (r.http_code, the error document in
// r.response), its message led by `what`: a miss (404, or 412: the object changed), access
// denied (403), corrupt (416: shorter than expected), unavailable (retryable), else internal.
Status http_status(const Request& r, std::string_view what);

}  // namespace kvtier::s3
