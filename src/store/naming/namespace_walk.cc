#include "naming/namespace_walk.h"

#include <algorithm>

#include "format/segment_format.h"
#include "naming/routing.h"

namespace kvtier {

Status walk_namespace(Agent& agent, const std::string& ns_dir, bool with_details,
                      const FanoutPagesFn& fn, uint64_t* other_files) {
  uint64_t others = 0;
  std::vector<std::string> fanouts;
  KVTIER_RETURN_IF_ERROR(agent.list(ns_dir, ListOptions{}, [&](const ObjectInfo& e) {
    if (e.is_dir && routing::is_fanout_name(e.name)) {
      fanouts.push_back(e.name);
    } else if (e.name != routing::kManifest && e.name != routing::kTempDir &&
               e.name != routing::kUsageFile && e.name != routing::kMembersFile &&
               e.name != routing::kReadMarksFile && e.name != routing::kDoorkeeperFile &&
               e.name != routing::kLookupsFile && e.name != routing::kGoneFile &&
               e.name != routing::kGenerationFile && e.name != segment::kDir) {
      ++others;
    }
    return ok_status();
  }));
  std::sort(fanouts.begin(), fanouts.end());
  for (const std::string& f : fanouts) {
    const std::string dir = ns_dir + "/" + f;
    std::vector<ObjectInfo> pages;
    Status st =
        agent.list(dir, ListOptions{.with_details = with_details}, [&](const ObjectInfo& e) {
          if (e.is_dir || !routing::is_page_name(e.name)) {
            ++others;
          } else {
            pages.push_back(e);
          }
          return ok_status();
        });
    if (st.code() == StatusCode::kNotFound) continue;
    KVTIER_RETURN_IF_ERROR(st);
    KVTIER_RETURN_IF_ERROR(fn(dir, pages));
  }
  if (other_files) *other_files += others;
  return ok_status();
}

}  // namespace kvtier
