// URLs of S3 requests: keys and query values percent-encoded as SigV4 signs them, and the
// object's URL in path style (endpoint/bucket/key) or virtual-host style (bucket.endpoint/key).
#pragma once

#include <string>
#include <string_view>

#include "s3_client.h"

namespace kvtier::s3 {

// Percent-encodes an object key for a URL path ('/' kept), as SigV4 expects.
std::string encode_key(std::string_view key);
// Percent-encodes a query value (everything but unreserved characters).
std::string encode_query_value(std::string_view value);

// The URL of request `r` of a client with options `opt`, its query sorted (as signed). It
// never contains secrets.
std::string object_url(const ClientOptions& opt, const Request& r);

}  // namespace kvtier::s3
