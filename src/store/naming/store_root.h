// A FILE store's base directories, as the store opens them (kvtier/core/file_access.h): each
// made where missing, resolved once to its real path, the one every path inside the store is
// built on (paths inside a store are opened without following any symbolic link, so the base
// itself must hold none), and checked before anything is put there.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kvtier/core/file_access.h"
#include "kvtier/core/status.h"
#include "kvtier/store/uri.h"
#include "kvtier/transfer/agent.h"

namespace kvtier::store_root {

// `share` of a FILE location (private unless the URI says share=group).
Result<Sharing> sharing_of(const StoreLocation& loc);

// realpath(3) of `dir`; errors as errno_status (kNotFound when it does not exist).
Result<std::string> real_dir(const std::string& dir);

// `dir` as it is opened: its real path where it exists, else `dir` as given (a missing base
// reads as empty).
std::string opened_as(const std::string& dir);

// Makes each base where missing (with the location's sharing), resolves it and checks it
// (check_store_root). The real paths, in the location's order. `may_make`, when given, is
// asked before a base is made, and its error returned (an open whose caller gave up makes
// nothing: the base may be a mount point whose filesystem went away meanwhile).
Result<std::vector<std::string>> prepare(Agent& agent, const StoreLocation& loc,
                                         const std::function<Status()>& may_make = {});

// After the store made its own directories under a base: each must be its own
// (check_own_dir), narrowed to the sharing's mode where an older tree granted more.
Status check_tree(const std::vector<std::string>& dirs, Sharing sharing);

}  // namespace kvtier::store_root
