#include "window/put_runs.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kvtier/core/mutex.h"
#include "window/put_encoding.h"
#include "window/store_core.h"

namespace kvtier::detail {
namespace {

struct Run {
  size_t first_desc = 0;
  size_t end_desc = 0;
  // Pages wholly in the run ([first_whole, end_whole) of Runs::whole), encoded before it goes
  // out, headers included; or one part of a large page, its chunks [chunk_from, chunk_to).
  size_t first_whole = 0;
  size_t end_whole = 0;
  size_t part = SIZE_MAX;
  size_t chunk_from = 0;
  size_t chunk_to = 0;
  bool last_part = false;     // its header goes out after it
  uint64_t sealed_bytes = 0;  // of the run's buffer: its pages' sealed bytes (run by run)
};

// Where a descriptor's memory is not yet known: it is at this offset of the buffer its run
// is sealed into, once a thread takes the run.
inline constexpr uint64_t kNotInRun = UINT64_MAX;

struct Runs {
  std::vector<Run> runs;
  std::vector<size_t> whole;
  std::vector<uint64_t> whole_at;  // per whole page: where its payload is in its run's buffer
  std::vector<MemDesc> mem;
  std::vector<uint64_t> in_run;  // per descriptor: its offset in its run's buffer, or kNotInRun
  std::vector<StorageDesc> sto;
  uint64_t run_buffer_bytes = 0;  // the largest run's sealed bytes
};

// Whether page `w` is sealed run by run, into the buffer of each run that writes it
// (StoreCore::stage_for_sealing), rather than into staging of its own.
bool sealed_in_runs(const PageWork<ConstBuffer>& w) {
  return through_staging(w.io) && !w.staging;
}

// Appends the descriptors of payload range [from, to) of page `w` (and, when `to` is its end,
// its padding) at object offset kHeaderBytes + from. A page sealed in runs has its bytes at
// `*run_at` of its run's buffer, which then moves past them.
void add_payload(Runs& r, const StoreCore& s, const PageWork<ConstBuffer>& w, uint64_t from,
                 uint64_t to, uint64_t* run_at) {
  const bool last = to == w.payload;
  const uint64_t padded = object_bytes(w.payload) - kHeaderBytes;
  if (through_staging(w.io)) {
    const uint64_t end = last ? padded : to;
    if (sealed_in_runs(w)) {
      r.mem.push_back(MemDesc{nullptr, end - from});
      r.in_run.push_back(*run_at);
      *run_at += end - from;
    } else {
      r.mem.push_back(MemDesc{w.staging.data() + from, end - from});
      r.in_run.push_back(kNotInRun);
    }
    r.sto.push_back(StorageDesc{&w.target, kHeaderBytes + from, end - from});
    return;
  }
  uint64_t off = kHeaderBytes + from;
  page::for_each_part(w.pieces, from, to, [&](const std::byte* d, uint64_t n) {
    r.mem.push_back(MemDesc{const_cast<std::byte*>(d), n});
    r.in_run.push_back(kNotInRun);
    r.sto.push_back(StorageDesc{&w.target, off, n});
    off += n;
  });
  if (last && padded > w.payload) {
    r.mem.push_back(MemDesc{const_cast<std::byte*>(s.zeros.data()), padded - w.payload});
    r.in_run.push_back(kNotInRun);
    r.sto.push_back(StorageDesc{&w.target, kHeaderBytes + w.payload, padded - w.payload});
  }
}

// The failure of any descriptor of a finished transfer, else OK.
Status first_failure(const Result<Transfer>& xfer) {
  if (!xfer.ok()) return xfer.status();
  for (const Status& st : xfer->results()) {
    if (!st.ok()) return st;
  }
  return ok_status();
}

}  // namespace

void write_in_runs(StoreCore& s, std::span<PageWork<ConstBuffer>> work,
                   std::span<const std::string_view> keys, uint64_t created_ns,
                   const pools::HeaderPool::Lease& blocks,
                   const std::function<Status(size_t)>& written, std::span<Status> results) {
  const size_t n = work.size();
  std::vector<PutEncoding> enc(n);
  Mutex failed_mu;
  auto fail = [&](size_t i, const Status& st) {
    MutexLock lock(failed_mu);
    if (results[i].ok()) results[i] = st;
  };
  // Every page's header begins here (its fixed fields; a sealed page's number and key).
  for (size_t i = 0; i < n; ++i) {
    if (!results[i].ok()) continue;  // not opened: not written
    results[i] = s.begin_put(enc[i], work[i], keys[work[i].page], created_ns, blocks.block(i));
  }

  // The runs, in page order: small pages gathered whole, large ones cut at chunk boundaries.
  Runs r;
  Run open;  // small pages gathering
  uint64_t open_bytes = 0;
  uint64_t open_sealed = 0;  // of its buffer
  auto close_open = [&] {
    if (open.end_whole != open.first_whole) {
      open.end_desc = r.mem.size();
      open.sealed_bytes = open_sealed;
      r.runs.push_back(open);
    }
    // The next run of small pages starts after whatever was added meanwhile.
    open = Run{};
    open.first_desc = r.mem.size();
    open.first_whole = open.end_whole = r.whole.size();
    open_bytes = 0;
    open_sealed = 0;
  };
  // A run sealed into a buffer of its own takes at most a share of the sealing staging, so
  // that each of the threads can hold one (but at least a chunk, or a small page whole).
  const uint64_t sealed_cap =
      std::min(kPutRunBytes, s.seal_staging.capacity() / (s.spread.size() + 1));
  for (size_t i = 0; i < n; ++i) {
    if (!results[i].ok()) continue;
    PageWork<ConstBuffer>& w = work[i];
    const uint64_t chunk = enc[i].chunk_bytes();
    const uint64_t most = sealed_in_runs(w) ? sealed_cap : kPutRunBytes;
    const uint64_t step = std::max<uint64_t>(most / chunk * chunk, chunk);
    if (w.payload <= step) {
      const uint64_t sealed = sealed_in_runs(w) ? object_bytes(w.payload) - kHeaderBytes : 0;
      if (open_bytes + w.payload > kPutRunBytes ||
          (open_sealed != 0 && open_sealed + sealed > sealed_cap)) {
        close_open();
      }
      r.mem.push_back(MemDesc{blocks.block(i).data(), kHeaderBytes});
      r.in_run.push_back(kNotInRun);
      r.sto.push_back(StorageDesc{&w.target, 0, kHeaderBytes});
      r.whole.push_back(i);
      r.whole_at.push_back(open_sealed);
      add_payload(r, s, w, 0, w.payload, &open_sealed);
      open.end_whole = r.whole.size();
      open_bytes += w.payload;
      continue;
    }
    close_open();
    for (uint64_t from = 0; from < w.payload; from += step) {
      const uint64_t to = std::min(w.payload, from + step);
      Run part;
      part.first_desc = r.mem.size();
      add_payload(r, s, w, from, to, &part.sealed_bytes);
      part.end_desc = r.mem.size();
      part.first_whole = part.end_whole = r.whole.size();
      part.part = i;
      part.chunk_from = from / chunk;
      part.chunk_to = (to + chunk - 1) / chunk;
      part.last_part = to == w.payload;
      r.runs.push_back(part);
    }
    close_open();  // small pages after it start a run of their own
  }
  close_open();
  for (const Run& run : r.runs) r.run_buffer_bytes = std::max(r.run_buffer_bytes, run.sealed_bytes);

  // Descriptors [from, to), those of pages sealed in runs pointing into `buffer`.
  auto write = [&](size_t from, size_t to, std::byte* buffer) {
    std::span<const MemDesc> mem = std::span<const MemDesc>(r.mem).subspan(from, to - from);
    std::vector<MemDesc> placed;
    if (buffer != nullptr) {
      placed.assign(mem.begin(), mem.end());
      for (size_t d = from; d < to; ++d) {
        if (r.in_run[d] != kNotInRun) placed[d - from].addr = buffer + r.in_run[d];
      }
      mem = placed;
    }
    Result<Transfer> xfer = s.agent.make_request(
        TransferOp::kWrite, mem, std::span<const StorageDesc>(r.sto).subspan(from, to - from));
    if (xfer.ok()) {
      Status st = xfer->post();
      if (!st.ok()) return st;
      xfer->wait();
    }
    return first_failure(xfer);
  };
  // Page i's padding, zeroed in `buffer`, whose byte 0 is its payload's byte `base`.
  auto pad_in_run = [&](size_t i, std::byte* buffer, uint64_t base) {
    const uint64_t padded = object_bytes(work[i].payload) - kHeaderBytes;
    std::memset(buffer + (work[i].payload - base), 0, padded - work[i].payload);
  };
  // Run `ri`, its sealed pages sealed into `buffer` (null when it has none).
  auto run_one = [&](size_t ri, std::byte* buffer) {
    const Run& run = r.runs[ri];
    if (run.part == SIZE_MAX) {
      Status st;
      for (size_t k = run.first_whole; k < run.end_whole && st.ok(); ++k) {
        const size_t i = r.whole[k];
        PutEncoding& e = enc[i];
        std::byte* at = sealed_in_runs(work[i]) ? buffer + r.whole_at[k] : nullptr;
        for (size_t c = 0; c < e.chunks() && st.ok(); ++c) {
          st = e.chunk(c, at != nullptr ? at + c * e.chunk_bytes() : nullptr);
        }
        if (!st.ok()) break;
        if (at != nullptr) pad_in_run(i, at, 0);
        e.finish();
      }
      if (st.ok()) st = write(run.first_desc, run.end_desc, buffer);
      for (size_t k = run.first_whole; k < run.end_whole; ++k) {
        fail(r.whole[k], st.ok() ? written(r.whole[k]) : st);
      }
      return;
    }
    const size_t i = run.part;
    const bool in_run = sealed_in_runs(work[i]);
    const uint64_t base = run.chunk_from * enc[i].chunk_bytes();
    Status st;
    for (size_t c = run.chunk_from; c < run.chunk_to && st.ok(); ++c) {
      st = enc[i].chunk(c, in_run ? buffer + (c * enc[i].chunk_bytes() - base) : nullptr);
    }
    if (st.ok() && in_run && run.last_part) pad_in_run(i, buffer, base);
    if (st.ok()) st = write(run.first_desc, run.end_desc, buffer);
    if (!st.ok()) fail(i, st);
    // The page's last part (its parts are one thread's, in order): its header, once every
    // chunk is known (and none failed).
    if (!run.last_part) return;
    {
      MutexLock lock(failed_mu);
      if (!results[i].ok()) return;
    }
    enc[i].finish();
    const MemDesc mem{blocks.block(i).data(), kHeaderBytes};
    const StorageDesc sto{&work[i].target, 0, kHeaderBytes};
    Result<Transfer> xfer = s.agent.make_request(TransferOp::kWrite, {&mem, 1}, {&sto, 1});
    Status hs = xfer.ok() ? xfer->post() : xfer.status();
    if (hs.ok()) {
      xfer->wait();
      hs = first_failure(xfer);
    }
    fail(i, hs.ok() ? written(i) : hs);
  };
  // A thread takes a run of small pages, or every run of a large page in turn: two threads
  // writing one file at once would only queue on its inode's lock (ext4 spins on it).
  std::vector<size_t> first_run;
  for (size_t ri = 0; ri < r.runs.size(); ++ri) {
    const size_t part = r.runs[ri].part;
    if (part == SIZE_MAX || ri == 0 || r.runs[ri - 1].part != part) first_run.push_back(ri);
  }
  first_run.push_back(r.runs.size());
  const auto take = [&](size_t item) {
    // The buffer its sealed runs are sealed into, one after the other, while this thread
    // writes them: about 1 MiB, so the sealed bytes are still in this core's cache when the
    // write copies them, and the buffer is back in the pool for the next run at once.
    bool sealed = false;
    for (size_t ri = first_run[item]; ri < first_run[item + 1]; ++ri) {
      sealed = sealed || r.runs[ri].sealed_bytes != 0;
    }
    StagingPool::Lease buffer;
    if (sealed) {
      Result<StagingPool::Lease> lease = s.seal_staging.acquire_waiting(r.run_buffer_bytes, 0);
      if (!lease.ok()) {
        for (size_t ri = first_run[item]; ri < first_run[item + 1]; ++ri) {
          const Run& run = r.runs[ri];
          if (run.part != SIZE_MAX) fail(run.part, lease.status());
          for (size_t k = run.first_whole; k < run.end_whole; ++k) fail(r.whole[k], lease.status());
        }
        return;
      }
      buffer = std::move(lease).value();
    }
    for (size_t ri = first_run[item]; ri < first_run[item + 1]; ++ri) {
      run_one(ri, buffer ? buffer.data() : nullptr);
    }
  };
  const size_t items = first_run.size() - 1;
  if (items > 1 && s.spread.size() > 0) {
    s.spread.parallel_for(items, take);
  } else {
    for (size_t item = 0; item < items; ++item) take(item);
  }
}

}  // namespace kvtier::detail
