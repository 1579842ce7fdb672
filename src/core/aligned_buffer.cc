#include "kvtier/core/aligned_buffer.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

namespace kvtier {

Result<AlignedBuffer> AlignedBuffer::allocate(size_t size, size_t alignment, bool zero) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % sizeof(void*) != 0) {
    return invalid_argument_error(fmt::format("alignment {} is not a power of two", alignment));
  }
  AlignedBuffer buf;
  if (size == 0) return buf;
  void* p = nullptr;
  const int rc = ::posix_memalign(&p, alignment, align_up(size, alignment));
  if (rc != 0) {
    return errno_status(rc, "posix_memalign", {}, kNoPos, size);
  }
  if (zero) std::memset(p, 0, size);
  buf.data_ = static_cast<std::byte*>(p);
  buf.size_ = size;
  return buf;
}

void AlignedBuffer::release() noexcept {
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kvtier
