#include "kvtier/store/namespace.h"

#include <fmt/format.h>

#include <type_traits>

namespace kvtier {
namespace {

void field(std::string& out, std::string_view name, std::string_view value) {
  out += fmt::format("{}={}:{}\n", name, value.size(), value);
}

void field(std::string& out, std::string_view name, uint64_t value) {
  field(out, name, std::string_view(fmt::format("{}", value)));
}

}  // namespace

std::string NamespaceSpec::canonical() const {
  std::string out = "kvtier-namespace\n";
  field(out, "format", kPageFormatVersion);
  for_each_field([&](std::string_view name, const auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, ParallelRank>) {
      if (name == "tp" && mla) {
        field(out, name, std::string_view("replicated"));
      } else {
        field(out, name, std::string_view(fmt::format("{}/{}", value.rank, value.size)));
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      field(out, name, uint64_t{value ? 1u : 0u});
    } else {
      field(out, name, value);
    }
  });
  return out;
}

Hash128 NamespaceSpec::id() const {
  return hash128(canonical());
}

Status NamespaceSpec::validate() const {
  const std::pair<const char*, const ParallelRank*> ranks[] = {
      {"tp", &tp}, {"pp", &pp}, {"cp", &cp}, {"dp", &dp}};
  for (auto [name, r] : ranks) {
    if (r->size == 0 || r->rank >= r->size) {
      return invalid_argument_error(
          fmt::format("namespace: {} rank {} is not below its size {}", name, r->rank, r->size));
    }
  }
  if (pieces_per_page == 0) return invalid_argument_error("namespace: pieces_per_page is 0");
  return ok_status();
}

std::string NamespaceSpec::describe() const {
  std::string s =
      fmt::format("{} {} {} p{} ", model.empty() ? "(no model)" : model,
                  dtype.empty() ? "-" : dtype, layout.empty() ? "-" : layout, page_tokens);
  if (piece_bytes != 0) {
    s += fmt::format("{}x{}B", pieces_per_page, piece_bytes);
  } else {
    s += "any-size";
  }
  s += mla ? " mla" : fmt::format(" tp{}/{}", tp.rank, tp.size);
  s +=
      fmt::format(" pp{}/{} cp{}/{} dp{}/{}", pp.rank, pp.size, cp.rank, cp.size, dp.rank, dp.size);
  if (!salt.empty()) s += " salted";
  return s;
}

}  // namespace kvtier
