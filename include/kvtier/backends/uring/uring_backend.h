// FILE backend on io_uring (liburing).
//
// A few rings, each owned by one thread that is its only submitter. A batch is shared by the
// rings: each claims descriptors, keeps up to `queue_depth` of them in flight, and sleeps in
// one blocking wait until a completion or new work arrives (no polling). Every descriptor is
// one SQE; a short transfer is resubmitted from where it stopped, EAGAIN/EINTR are retried,
// and a descriptor completes only when every byte moved. Memory regions registered with the
// agent become io_uring fixed buffers on every ring, so transfers into them use
// READ_FIXED/WRITE_FIXED (no page pinning per I/O). Opening a batch of objects is one batch of
// OPENAT requests.
//
// Batches of at most `inline_bytes` run on the caller's thread with preadv/pwritev, as on the
// posix backend, and opens of a few objects with openat: waking a ring thread and then the
// caller costs more than moving a small page.
//
// Objects are created, published and removed exactly as by the posix backend (the shared
// FileBackend), so the two read each other's files.
//
// Descriptors are ordinary (not io_uring direct descriptors): publishing an O_TMPFILE needs a
// descriptor linkat() can name, and a direct descriptor would tie a target to one ring. The
// store bounds how many are open at once.
//
// Thread-safety: safe for concurrent use by multiple threads (a prefetch reader and a backup
// writer submitting at once).
#pragma once

#include <cstdint>
#include <memory>

#include "kvtier/core/file_access.h"
#include "kvtier/core/status.h"
#include "kvtier/transfer/backend.h"

namespace kvtier {

struct UringBackendOptions {
  // Rings, one thread each (started with the first batch a ring is handed); 0: one per CPU
  // the process may run on (usable_cpus()), between 2 and 8.
  size_t rings = 0;
  // Requests in flight per ring.
  uint32_t queue_depth = 64;
  // Register memory regions as fixed buffers (falls back to plain reads/writes, and says so,
  // when the kernel refuses, e.g. over RLIMIT_MEMLOCK).
  bool fixed_buffers = true;
  // Caps the bytes of one request (0: no cap); exercises resubmission in tests.
  uint64_t max_io_bytes = 0;
  // Use O_TMPFILE where the filesystem supports it.
  bool use_tmpfile = true;
  // Batches of at most this many bytes (and opens of up to 8 objects) run on the
  // caller's thread with preadv/pwritev instead of the rings; 0: never.
  uint64_t inline_bytes = 4 << 20;
  // Who may reach what it creates: private (0600 files, 0700 directories) or group
  // (kvtier/core/file_access.h). The `share` parameter.
  Sharing sharing = Sharing::kPrivate;
};

// kUnavailable with the reason when io_uring cannot be set up here (old kernel, seccomp,
// kernel.io_uring_disabled), so `auto` selection falls back to posix and reports why.
Result<std::unique_ptr<Backend>> make_uring_backend(const UringBackendOptions& options = {});

// Factory for the registry. Parameters: rings, queue_depth, fixed_buffers, max_io_bytes,
// use_tmpfile, inline_bytes, share.
Result<std::unique_ptr<Backend>> create_uring_backend(const BackendParams& params);
// The parameters create_uring_backend() reads.
std::vector<ParamSpec> uring_backend_params();

}  // namespace kvtier
