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

void Watch::start() {
  if (std::optional<Generation> g = read(agent_, path_)) {
    MutexLock lock(mu_);
    seen_ = *g;
  }
}

void Watch::observe(uint64_t max_age_ns, const std::function<void()>& on_cleared) {
  const uint64_t asked = now_ns();
  const uint64_t read_at = read_ns_.load(std::memory_order_acquire);
  if (read_at != 0 && read_at + max_age_ns >= asked) return;
  std::optional<Generation> now = read(agent_, path_);
  if (!now) return;
  {
    MutexLock lock(mu_);
    if (*now != seen_) {
      seen_ = *now;
      on_cleared();
    }
  }
  read_ns_.store(asked, std::memory_order_release);
}

Status Watch::publish() {
  KVTIER_RETURN_IF_ERROR(clear_generation::publish(agent_, path_, temp_dir_));
  if (std::optional<Generation> now = read(agent_, path_)) {
    MutexLock lock(mu_);
    seen_ = *now;
  }
  return ok_status();
}

}  // namespace kvtier::clear_generation
