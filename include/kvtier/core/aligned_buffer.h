// AlignedBuffer: an owned, aligned, move-only block of memory (page staging, direct I/O).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "kvtier/core/status.h"

namespace kvtier {

inline constexpr size_t kDefaultAlignment = 4096;

constexpr uint64_t align_up(uint64_t v, uint64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}
constexpr bool is_aligned(uint64_t v, uint64_t alignment) {
  return v % alignment == 0;
}

class AlignedBuffer {
 public:
  AlignedBuffer() noexcept = default;
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { release(); }

  // `alignment` must be a power of two and a multiple of sizeof(void*). When `zero` is set the
  // memory is zero-filled (which also faults every page in).
  static Result<AlignedBuffer> allocate(size_t size, size_t alignment = kDefaultAlignment,
                                        bool zero = true);

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<std::byte> span() noexcept { return {data_, size_}; }
  std::span<const std::byte> span() const noexcept { return {data_, size_}; }

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier
