// Walking a store location without opening a Store: every namespace of every base, with its
// page files and its segments' live records, what `kvtier stat`, `ls`, `verify`, `gc` and
// `clear` start from (inspect.h).
#pragma once

#include <string>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/uri.h"
#include "kvtier/transfer/agent.h"

namespace kvtier::inspect {

// An agent for the location's backend.
Result<Agent> agent_for(const StoreLocation& loc);
// A namespace directory's segment directory.
std::string seg_dir_of(const std::string& ns_dir);

// Walks <base>/kvtier/<ns>/<xx>/<page> and each namespace's segments for every base, filling
// `inv` and (when given) `pages`; `progress`, when given, is told of each page found and may
// stop the walk (kCancelled). The live records of a namespace's segments are what a store's
// index holds on open: every summary's entries in time order, the latest put or remove of a
// key deciding.
Status walk(Agent& agent, const StoreLocation& loc, Inventory* inv, std::vector<PageListing>* pages,
            const ListProgress* progress = nullptr);

}  // namespace kvtier::inspect
