// A key file: the master keys a store seals and opens pages with. Key material comes only
// from such a file, named by a path or by the environment variable KVTIER_KEY_FILE, never
// from a URI or a command line.
//
//   # comments and blank lines are ignored
//   <key id> <64 hex digits>      the current key: new pages are sealed under it
//   <key id> <64 hex digits>      earlier keys, in any order: pages under them still open
//
// A key id is a decimal number from 1 to 4294967295, written into every sealed page, so a
// page names the key it needs; ids are unique within a file. The file must be a regular file
// owned by the caller (or root) with no permission bits for group or others: anything else
// is refused before a byte of it is read. Error messages name the file and a line number,
// never a line's text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/core/status.h"
#include "seal/secret.h"

namespace kvtier::seal {

inline constexpr size_t kMasterKeyBytes = 32;
inline constexpr const char* kKeyFileVariable = "KVTIER_KEY_FILE";

struct MasterKey {
  uint32_t id = 0;
  Secret bytes;  // kMasterKeyBytes
};

class KeyFile {
 public:
  // kPermissionDenied for a file others may read or write or that another user owns,
  // kInvalidArgument for a malformed one (naming the line), kNotFound for a missing one.
  static Result<KeyFile> load(const std::string& path);
  // The file named by $KVTIER_KEY_FILE; kNotFound when the variable is unset or empty.
  static Result<KeyFile> from_environment();

  const MasterKey& current() const noexcept { return keys_.front(); }
  // The key with this id, or nullptr.
  const MasterKey* find(uint32_t id) const noexcept;
  const std::vector<MasterKey>& keys() const noexcept { return keys_; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::vector<MasterKey> keys_;  // current first; never empty
};

}  // namespace kvtier::seal
