#include "s3_responses.h"

#include <fmt/format.h>

#include <pugixml.hpp>
#include <string>

namespace kvtier::s3 {
namespace {

// "<Code>: <Message>" of an S3 error document, or "".
std::string s3_error(const std::string& body) {
  if (body.empty()) return {};
  pugi::xml_document doc;
  if (!doc.load_buffer(body.data(), body.size())) return {};
  pugi::xml_node e = doc.child("Error");
  if (!e) return {};
  std::string code = e.child_value("Code");
  std::string msg = e.child_value("Message");
  if (msg.empty()) return code;
  return code.empty() ? msg : code + ": " + msg;
}

}  // namespace

bool retryable_curl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool retryable_http(long code) {
  return code == 429 || code == 500 || code == 502 || code == 503 || code == 504;
}

Status http_status(const Request& r, std::string_view what) {
  const long code = r.http_code;
  std::string detail = s3_error(r.response);
  if (!detail.empty()) detail = " (" + detail + ")";
  switch (code) {
    case 404:
      return not_found_error(fmt::format("{}: not found{}", what, detail));
    case 403:
      return permission_denied_error(
          fmt::format("{}: access denied{}: check the credentials and the region", what, detail));
    case 412:
      return not_found_error(
          fmt::format("{}: the object changed since it was opened{}", what, detail));
    case 416:
      return corrupt_error(fmt::format("{}: the object is shorter than expected{}", what, detail));
    default:
      break;
  }
  if (retryable_http(code)) {
    return unavailable_error(fmt::format("{}: HTTP {}{}", what, code, detail));
  }
  return internal_error(fmt::format("{}: HTTP {}{}", what, code, detail));
}

}  // namespace kvtier::s3
