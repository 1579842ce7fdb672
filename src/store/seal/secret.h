// Key material in memory: locked where RLIMIT_MEMLOCK allows (never written to swap), left out
// of core dumps (MADV_DONTDUMP), and wiped before it is released. A Secret cannot be copied,
// printed or compared; it is moved, and read only through bytes().
#pragma once

#include <cstddef>
#include <span>

#include "kvtier/core/status.h"

namespace kvtier::seal {

class Secret {
 public:
  // `size` zeroed bytes on pages of their own. kResourceExhausted when mmap fails.
  static Result<Secret> make(size_t size);

  Secret() = default;
  Secret(Secret&& other) noexcept;
  Secret& operator=(Secret&& other) noexcept;
  Secret(const Secret&) = delete;
  Secret& operator=(const Secret&) = delete;
  ~Secret();

  std::span<std::byte> bytes() noexcept { return {data_, size_}; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  size_t size() const noexcept { return size_; }
  // Whether the pages are locked in memory (mlock may be refused by RLIMIT_MEMLOCK; the
  // pages are then still left out of core dumps and wiped).
  bool locked() const noexcept { return locked_; }

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
  bool locked_ = false;
};

}  // namespace kvtier::seal
