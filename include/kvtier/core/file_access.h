// Who may reach what kvtier creates in a directory tree, and how paths inside it are opened.
//
// Sharing::kPrivate (the default): directories 0700, files 0600. A umask only takes bits away,
// so these hold whatever the umask. Sharing::kGroup (hosts of one cluster running as one
// group): directories 02770 (new entries inherit the group) and files 0660, set with
// fchmod/chmod after creation, since a umask of 022 would take the group's write bit.
//
// Paths are opened without following a symbolic link in any component (openat2's
// RESOLVE_NO_SYMLINKS): a link planted in a store's tree is neither read nor written through;
// the open fails (kPermissionDenied, naming the path). Callers pass paths whose
// every component is a real directory (a store resolves its base directories once, when it
// opens: see resolve_base in the store). Where openat2 is missing (Linux before 5.6, or a
// seccomp filter that refuses it), O_NOFOLLOW guards the last component only.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "kvtier/core/status.h"
#include "kvtier/core/unique_fd.h"

namespace kvtier {

enum class Sharing { kPrivate, kGroup };

// "private" or "group"; kInvalidArgument naming the value otherwise.
Result<Sharing> parse_sharing(std::string_view value);
std::string_view sharing_name(Sharing s);

struct CreateModes {
  mode_t file = 0600;
  mode_t dir = 0700;
  // Set the modes exactly after creating (the umask may have taken bits they need).
  bool exact = false;
};
CreateModes create_modes(Sharing s);

// openat2(dir, path, flags | O_CLOEXEC, mode) refusing symbolic links in every component of
// `path` (see above). A link met is kPermissionDenied ("... is or passes through a symbolic
// link"); other errors as open_at().
Result<UniqueFd> open_no_symlinks(BorrowedFd dir, const char* path, int flags, mode_t mode = 0);
// The error open_no_symlinks() gives for a link (for opens made elsewhere: io_uring's OPENAT2).
Status symlink_refused(std::string_view path);

// Opens (creating where missing) a file kvtier keeps beside the pages (ledgers, shared
// counters): with the sharing of the directory it is in, which the store made with its own
// (group: a setgid directory the group may write), so every process that shares the
// directory can open it.
Result<UniqueFd> open_own_file(const std::string& path, int flags);

// After creating a file or directory: fchmod to the exact mode where `modes.exact` asks for it.
Status finish_created(int fd, mode_t mode, const CreateModes& modes, std::string_view path);

// mkdir(path) with modes.dir (set exactly where asked). An existing directory is fine unless it
// is a symbolic link (kPermissionDenied) or not a directory (ENOTDIR).
Status make_dir(const char* path, const CreateModes& modes);

// Checks a directory a store is rooted at (resolved: no links in it) before anything is put
// there. Refused with kPermissionDenied and the reason: a directory anyone may write that lacks
// the sticky bit (anyone could replace what is in it); one owned by another user (they could
// read and change everything), except with kGroup one whose group is one of this process's
// groups and that only its owner and group may write.
Status check_store_root(const std::string& dir, Sharing sharing);

// Checks a directory kvtier made inside a store's root (its own tree): it must be owned by this
// process's user (with kGroup: or belong to one of its groups) and be a real directory. Where it
// is ours but grants more than `modes.dir` (made by an older kvtier under umask 022), its mode
// is narrowed to modes.dir.
Status check_own_dir(const std::string& dir, const CreateModes& modes);

}  // namespace kvtier
