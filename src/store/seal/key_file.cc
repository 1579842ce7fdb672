#include "seal/key_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kvtier/core/unique_fd.h"

namespace kvtier::seal {
namespace {

// Larger than any sensible key file (each key is a 75-byte line): refuse rather than read.
constexpr size_t kMaxFileBytes = 64 << 10;

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trim(std::string_view s) noexcept {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

// One "<id> <hex>" line into `key`. The message says what is wrong, never what the line holds.
Status parse_line(std::string_view line, MasterKey& key) {
  const auto space = line.find_first_of(" \t");
  if (space == std::string_view::npos) {
    return invalid_argument_error("expected \"<key id> <64 hex digits>\"");
  }
  const std::string_view id = line.substr(0, space);
  const std::string_view hex = trim(line.substr(space));
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
  if (ec != std::errc() || end != id.data() + id.size() || value == 0 || value > UINT32_MAX) {
    return invalid_argument_error("the key id is not a number from 1 to 4294967295");
  }
  if (hex.size() != 2 * kMasterKeyBytes) {
    return invalid_argument_error("the key is not 64 hex digits (256 bits)");
  }
  KVTIER_ASSIGN_OR_RETURN(key.bytes, Secret::make(kMasterKeyBytes));
  std::span<std::byte> out = key.bytes.bytes();
  for (size_t i = 0; i < kMasterKeyBytes; ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return invalid_argument_error("the key holds a character that is not hex");
    out[i] = static_cast<std::byte>(hi << 4 | lo);
  }
  key.id = static_cast<uint32_t>(value);
  return ok_status();
}

}  // namespace

Result<KeyFile> KeyFile::load(const std::string& path) {
  if (path.empty()) return invalid_argument_error("no key file named");
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_file(path.c_str(), O_RDONLY));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "fstat", path);
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument_error("key file " + path + " is not a regular file");
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return permission_denied_error("key file " + path +
                                   " is owned by another user: a key file must be the caller's "
                                   "(or root's)");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return permission_denied_error("key file " + path + " has mode " + mode +
                                   ": group and others may not read or write it (chmod 600 " +
                                   path + ")");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    return invalid_argument_error("key file " + path + " is larger than 64 KiB");
  }
  // The text holds the keys in hex: it lives in a Secret too, wiped once parsed.
  KVTIER_ASSIGN_OR_RETURN(Secret text, Secret::make(kMaxFileBytes + 1));
  size_t have = 0;
  for (;;) {
    const ssize_t n = ::read(fd.get(), text.bytes().data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "read", path);
    if (n == 0) break;
    have += static_cast<size_t>(n);
    if (have > kMaxFileBytes) {
      return invalid_argument_error("key file " + path + " is larger than 64 KiB");
    }
  }

  KeyFile file;
  file.path_ = path;
  const std::string_view all(reinterpret_cast<const char*>(text.bytes().data()), have);
  size_t line_no = 0;
  for (size_t pos = 0; pos < all.size();) {
    size_t eol = all.find('\n', pos);
    if (eol == std::string_view::npos) eol = all.size();
    const std::string_view line = trim(all.substr(pos, eol - pos));
    pos = eol + 1;
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    MasterKey key;
    Status s = parse_line(line, key);
    if (!s.ok()) {
      return invalid_argument_error("key file " + path + " line " + std::to_string(line_no) + ": " +
                                    std::string(s.message()));
    }
    if (file.find(key.id) != nullptr) {
      return invalid_argument_error("key file " + path + " line " + std::to_string(line_no) +
                                    ": key id " + std::to_string(key.id) + " appears twice");
    }
    file.keys_.push_back(std::move(key));
  }
  if (file.keys_.empty()) return invalid_argument_error("key file " + path + " holds no key");
  return file;
}

Result<KeyFile> KeyFile::from_environment() {
  const char* path = std::getenv(kKeyFileVariable);
  if (path == nullptr || *path == '\0') {
    return not_found_error(std::string(kKeyFileVariable) + " is not set");
  }
  return load(path);
}

const MasterKey* KeyFile::find(uint32_t id) const noexcept {
  for (const MasterKey& k : keys_) {
    if (k.id == id) return &k;
  }
  return nullptr;
}

}  // namespace kvtier::seal
