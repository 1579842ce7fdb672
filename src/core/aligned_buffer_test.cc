#include "kvtier/core/aligned_buffer.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(AlignedBuffer, AllocatesAlignedZeroedMemory) {
  Result<AlignedBuffer> b = AlignedBuffer::allocate(70272, 4096);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 70272u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
  for (std::byte x : b->span()) ASSERT_EQ(x, std::byte{0});
}

TEST(AlignedBuffer, RejectsBadAlignment) {
  EXPECT_EQ(AlignedBuffer::allocate(10, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AlignedBuffer::allocate(10, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(AlignedBuffer, MoveLeavesTheSourceEmpty) {
  Result<AlignedBuffer> b = AlignedBuffer::allocate(4096);
  ASSERT_TRUE(b.ok());
  std::byte* p = b->data();
  AlignedBuffer c = std::move(b).value();
  EXPECT_EQ(c.data(), p);
  AlignedBuffer d;
  d = std::move(c);
  EXPECT_EQ(d.data(), p);
  EXPECT_TRUE(c.empty());  // NOLINT(bugprone-use-after-move)
}

TEST(AlignedBuffer, HugeSizeFailsCleanly) {
  Result<AlignedBuffer> b = AlignedBuffer::allocate(size_t{1} << 62);
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
}

TEST(Align, UpAndCheck) {
  EXPECT_EQ(align_up(0, 4096), 0u);
  EXPECT_EQ(align_up(1, 4096), 4096u);
  EXPECT_EQ(align_up(4096, 4096), 4096u);
  EXPECT_TRUE(is_aligned(8192, 512));
  EXPECT_FALSE(is_aligned(70272, 512));
}

}  // namespace
}  // namespace kvtier
