// Walks one namespace directory (<base>/kvtier/<ns>/): the store lists it to fill its index
// and to clear it, `kvtier stat`/`verify`/`ls` to inspect it. One walker, so both agree on
// what a page is and what is not kvtier's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/transfer/agent.h"

namespace kvtier {

// Gets the page objects of one fan-out directory, `dir` being its path.
using FanoutPagesFn =
    std::function<Status(const std::string& dir, const std::vector<ObjectInfo>& pages)>;

// Lists namespace directory `ns_dir` one fan-out directory at a time, in name order, and
// calls `fn` with each one's pages (sizes and times filled in when `with_details`). Fan-out
// directories that vanish meanwhile are skipped; an error listing `ns_dir` itself (kNotFound
// when it does not exist) or from `fn` is returned. `other_files`, when given, is increased
// by the entries that are not kvtier's: neither fan-out directories nor pages, nor the
// namespace's manifest, temporaries, ledger files or clear generation.
Status walk_namespace(Agent& agent, const std::string& ns_dir, bool with_details,
                      const FanoutPagesFn& fn, uint64_t* other_files = nullptr);

}  // namespace kvtier
