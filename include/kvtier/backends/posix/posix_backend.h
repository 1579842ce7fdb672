// FILE backend on pread/pwrite (preadv/pwritev) over a bounded worker pool. Batches of at
// most `inline_bytes` run on the caller's thread instead (waking a worker and then the caller
// costs more than moving a small page).
//
// The reference FILE backend and the fallback when io_uring cannot be used. Adjacent
// descriptors of one batch that continue each other in the same file become one vectored
// system call (a page header and its pieces: one preadv). Short transfers are resumed where
// they stopped and EINTR is retried, so a descriptor is OK only when every byte moved.
//
// New objects are written to an unnamed O_TMPFILE in the target's temp_dir and linked into
// place on publish; filesystems without O_TMPFILE get a uniquely named temporary
// (`<name>.<host>.<pid>.<seq>.kvtmp`) renamed into place. Every descriptor is owned by a
// target; nothing stays open once targets and transfers are gone.
//
// Thread-safety: safe for concurrent use by multiple threads.
#pragma once

#include <cstdint>
#include <memory>

#include "kvtier/core/file_access.h"
#include "kvtier/core/status.h"
#include "kvtier/transfer/backend.h"

namespace kvtier {

struct PosixBackendOptions {
  // Worker threads (started with the first batch the pool is handed); 0 picks
  // max(4, 2 x the CPUs the process may run on, usable_cpus()), at most 64.
  size_t io_threads = 0;
  // Caps the bytes of one system call (0: no cap). Exercises the short-transfer path in tests;
  // harmless otherwise.
  uint64_t max_io_bytes = 0;
  // Descriptors that continue each other merge into one call up to this many bytes.
  uint64_t max_merge_bytes = 1 << 20;
  // Use O_TMPFILE where the filesystem supports it.
  bool use_tmpfile = true;
  // Batches of at most this many bytes (and opens of up to 8 objects) run on the
  // caller's thread instead of the pool; 0: never.
  uint64_t inline_bytes = 4 << 20;
  // Who may reach what it creates: private (0600 files, 0700 directories) or group
  // (kvtier/core/file_access.h). The `share` parameter.
  Sharing sharing = Sharing::kPrivate;
};

std::unique_ptr<Backend> make_posix_backend(const PosixBackendOptions& options = {});

// Factory for the registry. Parameters: io_threads, max_io_bytes, max_merge_bytes,
// use_tmpfile, inline_bytes, share.
Result<std::unique_ptr<Backend>> create_posix_backend(const BackendParams& params);
// The parameters create_posix_backend() reads.
std::vector<ParamSpec> posix_backend_params();

}  // namespace kvtier
