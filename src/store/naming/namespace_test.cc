#include "kvtier/store/namespace.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>

namespace kvtier {
namespace {

NamespaceSpec base() {
  NamespaceSpec s;
  s.model = "meta-llama/Llama-3.1-8B@rev1";
  s.dtype = "bfloat16";
  s.layout = "page_first";
  s.page_tokens = 64;
  s.piece_bytes = 4 << 20;
  s.pieces_per_page = 2;
  s.tp = {1, 2};
  return s;
}

TEST(Namespace, EveryFieldChangesTheId) {
  const std::vector<std::function<void(NamespaceSpec&)>> changes = {
      [](NamespaceSpec& s) { s.model += "x"; },
      [](NamespaceSpec& s) { s.dtype = "float16"; },
      [](NamespaceSpec& s) { s.layout = "layer_first"; },
      [](NamespaceSpec& s) { s.page_tokens = 32; },
      [](NamespaceSpec& s) { s.piece_bytes += 1; },
      [](NamespaceSpec& s) { s.pieces_per_page = 1; },
      [](NamespaceSpec& s) { s.tp.rank = 0; },
      [](NamespaceSpec& s) { s.tp.size = 4; },
      [](NamespaceSpec& s) {
        s.pp = {0, 2};
      },
      [](NamespaceSpec& s) {
        s.cp = {0, 2};
      },
      [](NamespaceSpec& s) {
        s.dp = {1, 2};
      },
      [](NamespaceSpec& s) { s.mla = true; },
      [](NamespaceSpec& s) { s.salt = "tenant-a"; },
  };
  std::set<std::string> ids = {base().id().hex()};
  for (const auto& change : changes) {
    NamespaceSpec s = base();
    change(s);
    EXPECT_TRUE(ids.insert(s.id().hex()).second) << s.canonical();
  }
}

TEST(Namespace, EqualSpecsShareAnId) {
  EXPECT_EQ(base().id(), base().id());
}

TEST(Namespace, FieldsCannotBleedIntoEachOther) {
  NamespaceSpec a = base(), b = base();
  a.model = "m";
  a.dtype = "x\ndtype=1:y";
  b.model = "m\ndtype=1:x";
  b.dtype = "y";
  EXPECT_NE(a.id(), b.id());
}

TEST(Namespace, MlaIsReplicatedAcrossTensorParallelRanks) {
  NamespaceSpec r0 = base(), r1 = base();
  r0.mla = r1.mla = true;
  r0.tp = {0, 8};
  r1.tp = {5, 8};
  EXPECT_EQ(r0.id(), r1.id());
  r1.pp = {1, 2};
  EXPECT_NE(r0.id(), r1.id());
}

TEST(Namespace, Validation) {
  EXPECT_TRUE(base().validate().ok());
  NamespaceSpec s = base();
  s.tp = {2, 2};
  EXPECT_EQ(s.validate().code(), StatusCode::kInvalidArgument);
  s = base();
  s.dp.size = 0;
  EXPECT_EQ(s.validate().code(), StatusCode::kInvalidArgument);
  s = base();
  s.pieces_per_page = 0;
  EXPECT_EQ(s.validate().code(), StatusCode::kInvalidArgument);
}

TEST(Namespace, DescribeNeverShowsTheSalt) {
  NamespaceSpec s = base();
  s.salt = "secret-tenant";
  EXPECT_EQ(s.describe().find("secret"), std::string::npos);
  EXPECT_NE(s.describe().find("salted"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
