#include "naming/clear_generation.h"

#include <fmt/format.h>

#include <random>

#include "kvtier/core/clock.h"
#include "naming/object_io.h"

namespace kvtier::clear_generation {

std::optional<Generation> read(Agent& agent, const std::string& path) {
  Result<ObjectInfo> info = agent.stat(path);
  if (info.ok()) return Generation{info->identity, info->mtime_ns, info->size};
  if (info.status().code() == StatusCode::kNotFound) return Generation{};
  return std::nullopt;
}

Status publish(Agent& agent, const std::string& path, const std::string& temp_dir) {
  std::random_device rd;
  const std::string token = fmt::format("{:08x}{:08x}{:016x}\n", rd(), rd(), wall_ns());
  return object_io::write_object(agent, path, temp_dir, token);
}

}  // namespace kvtier::clear_generation
