#include "kvtier/store/uri.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "kvtier/backends/builtin.h"

namespace kvtier {
namespace {

// %XX decoding for query values and paths.
Result<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) {
      return invalid_argument_error(fmt::format("truncated %-escape in '{}'", s));
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = hex(s[i + 1]);
    const int lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return invalid_argument_error(fmt::format("bad %-escape in '{}'", s));
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// %XX encoding of what would not parse back: '%' itself, control bytes, and `specials`
// (the separators of the part being written).
std::string percent_encode(std::string_view s, std::string_view specials) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '%' || u < 0x20 || u == 0x7f || specials.find(ch) != std::string_view::npos) {
      out += fmt::format("%{:02X}", u);
    } else {
      out += ch;
    }
  }
  return out;
}

// What each part of a URI must not hold unencoded.
constexpr std::string_view kPathSpecials = "?,";
constexpr std::string_view kValueSpecials = "&";

Result<std::string> normalize_dir(std::string_view raw) {
  if (raw.empty()) return invalid_argument_error("empty directory path");
  if (raw.find('\0') != std::string_view::npos) {
    return invalid_argument_error("directory path contains a NUL byte");
  }
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(std::filesystem::path(raw), ec);
  if (ec) return invalid_argument_error(fmt::format("bad path '{}': {}", raw, ec.message()));
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// S3 bucket naming rules (the DNS-compatible subset every S3 implementation accepts).
bool valid_bucket_name(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  return b.front() != '.' && b.front() != '-' && b.back() != '.' && b.back() != '-';
}

// Parameters whose values are secrets: never printed.
bool is_secret_param(std::string_view name) {
  return name.find("secret") != std::string_view::npos ||
         name.find("token") != std::string_view::npos ||
         name.find("password") != std::string_view::npos;
}

}  // namespace

std::string StoreLocation::uri() const {
  std::string s;
  if (storage_class == StorageClass::kMemory) {
    s = "mem://" +
        percent_encode(bases.empty() ? std::string() : bases.front().substr(1), kPathSpecials);
  } else if (storage_class == StorageClass::kObject) {
    auto bucket = params.find("bucket");
    s = "s3://" + (bucket == params.end() ? std::string() : bucket->second);
    if (!bases.empty() && bases.front() != "/") s += percent_encode(bases.front(), kPathSpecials);
  } else {
    s = "file://";
    for (size_t i = 0; i < bases.size(); ++i) {
      s += (i ? "," : "") + percent_encode(bases[i], kPathSpecials);
    }
  }
  char sep = '?';
  if (backend != "auto" && !(storage_class == StorageClass::kObject && backend == "s3")) {
    s += fmt::format("{}backend={}", sep, percent_encode(backend, kValueSpecials));
    sep = '&';
  }
  if (layout != "auto") {
    s += fmt::format("{}layout={}", sep, percent_encode(layout, kValueSpecials));
    sep = '&';
  }
  for (const auto& [k, v] : params) {
    if (storage_class == StorageClass::kObject && k == "bucket") continue;
    s += fmt::format("{}{}={}", sep, k,
                     is_secret_param(k) ? "REDACTED" : percent_encode(v, kValueSpecials));
    sep = '&';
  }
  for (const auto& [k, v] : store_params) {
    s += fmt::format("{}{}={}", sep, k, percent_encode(v, kValueSpecials));
    sep = '&';
  }
  return s;
}

Result<StoreLocation> parse_store_uri(std::string_view uri) {
  if (uri.empty()) return invalid_argument_error("empty store location");
  StoreLocation loc;
  std::string_view rest = uri;
  std::string_view scheme = "file";
  if (const size_t p = uri.find("://"); p != std::string_view::npos) {
    scheme = uri.substr(0, p);
    rest = uri.substr(p + 3);
  }
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return invalid_argument_error(fmt::format("query parameter '{}' is not name=value", kv));
    }
    KVTIER_ASSIGN_OR_RETURN(std::string value, percent_decode(kv.substr(eq + 1)));
    const std::string name(kv.substr(0, eq));
    if (name == "backend") {
      loc.backend = value.empty() ? "auto" : value;
    } else if (name == "layout") {
      if (value != "files" && value != "segments" && value != "auto") {
        return invalid_argument_error(
            fmt::format("layout '{}' (use files, segments or auto)", value));
      }
      loc.layout = std::move(value);
    } else if (name == "key" || name == "key_file" || name == "master_key") {
      // Never echo the value: it may be the key itself.
      return invalid_argument_error(
          fmt::format("'{}=' in a URI: key material never comes from a URI (which reaches logs and "
                      "command lines); name the key file with --key-file, StoreConfig::key_file or "
                      "KVTIER_KEY_FILE",
                      name));
    } else {
      loc.params[name] = std::move(value);
    }
  }
  // The tenant (sealed stores, StoreConfig::tenant) is the store's, whatever the scheme.
  if (auto it = loc.params.find("tenant"); it != loc.params.end()) {
    loc.store_params.insert(loc.params.extract(it));
  }

  if (scheme == "file") {
    loc.storage_class = StorageClass::kFile;
    for (const std::string_view name :
         {"deadline_ms", "probe_interval_ms", "isolate", "segment_lanes", "cpus", "admission",
          "refresh_ms", "chunk_hash"}) {
      if (auto it = loc.params.find(name); it != loc.params.end()) {
        loc.store_params.insert(loc.params.extract(it));
      }
    }
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      KVTIER_ASSIGN_OR_RETURN(std::string raw, percent_decode(rest.substr(0, comma)));
      if (!raw.empty()) {
        KVTIER_ASSIGN_OR_RETURN(std::string dir, normalize_dir(raw));
        if (std::find(loc.bases.begin(), loc.bases.end(), dir) != loc.bases.end()) {
          return invalid_argument_error(fmt::format("directory '{}' is listed twice", dir));
        }
        loc.bases.push_back(std::move(dir));
      }
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    if (loc.bases.empty()) {
      return invalid_argument_error(fmt::format("'{}' names no directory", uri));
    }
    return loc;
  }
  if (scheme == "mem") {
    loc.storage_class = StorageClass::kMemory;
    KVTIER_ASSIGN_OR_RETURN(std::string name, percent_decode(rest));
    if (name.empty()) name = "default";
    if (name.find('/') != std::string::npos) {
      return invalid_argument_error(fmt::format("mem:// name '{}' contains '/'", name));
    }
    loc.bases.push_back("/" + name);
    if (loc.params.find("instance") == loc.params.end()) loc.params["instance"] = name;
    return loc;
  }
  if (scheme == "s3") {
    // s3://bucket[/prefix]: the bucket goes to the backend, the prefix is the base.
    const size_t slash = rest.find('/');
    const std::string bucket(rest.substr(0, slash));
    if (!valid_bucket_name(bucket)) {
      return invalid_argument_error(fmt::format(
          "'{}' is not a bucket name (3-63 lowercase letters, digits, '.' and '-')", bucket));
    }
    std::string prefix;
    if (slash != std::string_view::npos) {
      KVTIER_ASSIGN_OR_RETURN(prefix, percent_decode(rest.substr(slash + 1)));
    }
    std::string base;
    for (size_t i = 0; i < prefix.size();) {
      const size_t end = std::min(prefix.find('/', i), prefix.size());
      const std::string_view part = std::string_view(prefix).substr(i, end - i);
      if (part == "." || part == "..") {
        return invalid_argument_error(fmt::format("s3 prefix '{}' contains '{}'", prefix, part));
      }
      if (!part.empty()) base += "/" + std::string(part);
      i = end + 1;
    }
    loc.storage_class = StorageClass::kObject;
    // The segment layout's lanes and the lookups' refresh interval are the store's, not the
    // backend's (deadline_ms is the S3 client's own here).
    for (const std::string_view name : {"segment_lanes", "refresh_ms", "chunk_hash"}) {
      if (auto it = loc.params.find(name); it != loc.params.end()) {
        loc.store_params.insert(loc.params.extract(it));
      }
    }
    loc.bases.push_back(base.empty() ? "/" : base);
    loc.params["bucket"] = bucket;
    if (loc.backend == "auto") loc.backend = "s3";
    if (builtin_backends().candidates(StorageClass::kObject).empty()) {
      return unsupported_error(
          fmt::format("'{}': no backend is built for storage class OBJ (this build has no S3 "
                      "support)",
                      uri));
    }
    return loc;
  }
  return invalid_argument_error(fmt::format(
      "unknown scheme '{}' in '{}' (use a path, file://, mem:// or s3://)", scheme, uri));
}

}  // namespace kvtier
