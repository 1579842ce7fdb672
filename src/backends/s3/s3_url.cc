#include "s3_url.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvtier::s3 {
namespace {

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

std::string percent_encode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace

std::string encode_key(std::string_view key) {
  return percent_encode(key, /*keep_slash=*/true);
}

std::string encode_query_value(std::string_view value) {
  return percent_encode(value, /*keep_slash=*/false);
}

std::string object_url(const ClientOptions& opt, const Request& r) {
  std::string url;
  const size_t scheme_end = opt.endpoint.find("://");
  if (opt.virtual_host && scheme_end != std::string::npos) {
    url = opt.endpoint.substr(0, scheme_end + 3) + opt.bucket + "." +
          opt.endpoint.substr(scheme_end + 3);
    url += "/" + encode_key(r.key);
  } else {
    url = opt.endpoint + "/" + opt.bucket;
    if (!r.key.empty()) url += "/" + encode_key(r.key);
  }
  if (!r.query.empty()) {
    auto q = r.query;
    std::sort(q.begin(), q.end());
    char sep = '?';
    for (const auto& [name, value] : q) {
      url += sep + encode_query_value(name) + "=" + encode_query_value(value);
      sep = '&';
    }
  }
  return url;
}

}  // namespace kvtier::s3
