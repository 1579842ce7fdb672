#include "kvtier/store/namespace.h"

#include <fmt/format.h>

namespace kvtier {
namespace {

void field(std::string& out, std::string_view name, std::string_view value) {
  out += fmt::format("{}={}:{}\n", name, value.size(), value);
}

void field(std::string& out, std::string_view name, uint64_t value) {
  field(out, name, std::string_view(fmt::format("{}", value)));
}

void rank_field(std::string& out, std::string_view name, const ParallelRank& r) {
  field(out, name, std::string_view(fmt::format("{}/{}", r.rank, r.size)));
}

}  // namespace

std::string NamespaceSpec::canonical() const {
  std::string out = "kvtier-namespace\n";
  field(out, "format", kPageFormatVersion);
  field(out, "model", model);
  field(out, "dtype", dtype);
  field(out, "layout", layout);
  field(out, "page_tokens", page_tokens);
  field(out, "piece_bytes", piece_bytes);
  field(out, "pieces_per_page", pieces_per_page);
  field(out, "mla", mla ? 1 : 0);
  if (mla) {
    field(out, "tp", std::string_view("replicated"));
  } else {
    rank_field(out, "tp", tp);
  }
  rank_field(out, "pp", pp);
  rank_field(out, "cp", cp);
  rank_field(out, "dp", dp);
  field(out, "salt", salt);
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
