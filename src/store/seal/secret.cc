#include "seal/secret.h"

#include <openssl/crypto.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace kvtier::seal {

Result<Secret> Secret::make(size_t size) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t mapped = (size + page - 1) / page * page;
  void* p = ::mmap(nullptr, mapped == 0 ? page : mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return errno_status(errno, "mmap for key material");
  Secret s;
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = size;
  s.mapped_ = mapped == 0 ? page : mapped;
  // Neither is a reason to refuse the key: a core dump that still held it would need
  // MADV_DONTDUMP to fail (it does not on Linux >= 3.4), and mlock is capped by RLIMIT_MEMLOCK.
  (void)::madvise(p, s.mapped_, MADV_DONTDUMP);
  s.locked_ = ::mlock(p, s.mapped_) == 0;
  return s;
}

Secret::Secret(Secret&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      locked_(std::exchange(other.locked_, false)) {}

Secret& Secret::operator=(Secret&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

Secret::~Secret() {
  release();
}

void Secret::release() noexcept {
  if (data_ == nullptr) return;
  // OPENSSL_cleanse is not optimised away, unlike a memset before munmap could be.
  OPENSSL_cleanse(data_, mapped_);
  if (locked_) (void)::munlock(data_, mapped_);
  (void)::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
  locked_ = false;
}

}  // namespace kvtier::seal
