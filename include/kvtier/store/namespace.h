// Namespaces: which pages may be exchanged.
//
// A namespace is derived from everything that decides the bytes of a KV page: the model (and
// its weights revision, as part of `model`), dtype, memory layout, page size in tokens, the
// byte geometry of a page, the parallel shard (TP/PP/CP/DP rank and size), the MLA flag, an
// optional salt (tenant), and the page format version. Two stores with equal specs share
// pages; any difference gives a different namespace id, a different directory, and a header
// mismatch should a page be copied across by hand.
//
// MLA models replicate the KV across tensor-parallel ranks: their namespace ignores the TP
// rank and size, so every rank reads the pages rank 0 wrote.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/core/checksum.h"
#include "kvtier/core/status.h"

namespace kvtier {

// The on-disk page format this build writes (and the only one it reads).
inline constexpr uint16_t kPageFormatVersion = 2;

struct ParallelRank {
  uint32_t rank = 0;
  uint32_t size = 1;
  friend bool operator==(const ParallelRank&, const ParallelRank&) = default;
};

struct NamespaceSpec {
  std::string model;   // model id, including the weights revision when known
  std::string dtype;   // "bfloat16", "float8_e4m3fn", ...
  std::string layout;  // "page_first", "page_first_direct", "layer_first", ...
  uint32_t page_tokens = 0;
  // Page geometry: every page is `pieces_per_page` pieces of `piece_bytes` each. With
  // piece_bytes == 0 pages may have any size (generic use); the size is still checked
  // against the stored header on every read.
  uint64_t piece_bytes = 0;
  uint32_t pieces_per_page = 1;
  ParallelRank tp, pp, cp, dp;
  bool mla = false;
  std::string salt;  // tenant or deployment salt; empty for none

  // Calls visit(name, value) for every field, in canonical order, with value a
  // const std::string&, uint64_t, bool or ParallelRank. Every form of the spec is rendered
  // from it (canonical(), the namespace manifest, the Python module's dict), so a new field
  // reaches them all. With `mla`, the TP rank is not part of the namespace: the canonical
  // form and the manifest write "replicated" for it.
  template <typename Visitor>
  void for_each_field(Visitor&& visit) const {
    visit("model", model);
    visit("dtype", dtype);
    visit("layout", layout);
    visit("page_tokens", uint64_t{page_tokens});
    visit("piece_bytes", piece_bytes);
    visit("pieces_per_page", uint64_t{pieces_per_page});
    visit("mla", mla);
    visit("tp", tp);
    visit("pp", pp);
    visit("cp", cp);
    visit("dp", dp);
    visit("salt", salt);
  }
  // A stable, unambiguous text form (length-prefixed values), the input of id().
  std::string canonical() const;
  Hash128 id() const;
  // kInvalidArgument for ranks >= sizes, zero sizes, pieces_per_page == 0.
  Status validate() const;
  // "llama3-8b bfloat16 page_first p64 2x4194304B tp0/1 ..." for logs.
  std::string describe() const;
};

}  // namespace kvtier
