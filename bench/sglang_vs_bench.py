#!/usr/bin/env python3
"""SGLang's own calls against `kvtier bench`: the GB/s a serving engine gets through the adapter
(batch_set_v1/batch_get_v1 for KV pools, batch_set_v2/batch_get_v2 for a hybrid model's side
pools), beside `kvtier bench` moving pages of the same size on the same location and layout,
in one run, the two taking turns in alternating order round by round.

Host pools are allocated as SGLang allocates them (an anonymous shared mapping, so pages start
page-aligned; see host_memory). Every shape writes about --mib MiB of fresh pages (new keys each round, after one uncounted
round that warms both sides up: a process's first writes pay for the page cache's first
pages), then reads them back
into the same host pool (page cache hot, memory touched before: both sides measure the
store's CPU path, not a disk), --batch pages a call (SGLang hands at most 128). The adapter is
configured as a new user would: only `uri` (and `file_layout` for the layout being compared).
Times count the calls only, as the bench does. Reads are checked byte for byte afterwards.
Two more columns: `kvtier bench --pool-pages N` moves the pages through a host pool as large
as the adapter's (by default the bench reuses one batch's worth of host memory, which stays
in the CPU's caches for small pages; a serving engine's pool does not), and "bare store"
moves the same number of pages through an adapter's store handle on the same pool memory
with the pieces worked out beforehand (batch_put_pieces / batch_get_pieces), the two taking
turns: adapter / bare store is what the adapter itself costs. --baseline REV runs the
adapter of an earlier git revision beside this one, on the same pool, in the same rounds.
Every side has a store (directory) of its own, deleted once it has written and read, as
each `kvtier bench` run's is: the next side starts with an empty store and the pages before
it freed (on these VMs, a write whose page cache cannot reuse them can run several times
slower in the kernel; docs/benchmarks.md, "Each side of a round in a store of its own").
--shared-store keeps the method before: the adapter and the bare store in one store a round.

Before every timed read, every side reads one batch's pages into every slot of its host pool,
untimed, as `kvtier bench` does before its own (warm_up() in tools/bench.cc: "as a serving
engine's pool would be"): the adapter through its own calls, the bare store through its
handle. Each round opens a new adapter; without this (--no-warm-reads, the method before
2026-12-05) its first timed batch took about 3 ms against 1.4 ms for the 16 MiB batches after
it, and a store's first read of 512 MiB ran 1.10-1.14x slower than after a warm-up
(docs/benchmarks.md, "SGLang's calls against `kvtier bench`").

Before every timed write, on every side, the bench syncs (no writeback of earlier data
competes with the write) and touches and frees the data's size of memory (plus 256 MiB), so
that the page cache is handed memory freed moments before (--no-warm-memory skips this);
then the host pool is read once by the kernel and once by user code, untimed (written 4 MiB
at a time into a scratch memfd, then a byte of every page read; `kvtier bench` does the
former with its pool, which it has just filled). On these VMs the first access to a page
costs about 6 us (shadow page tables), and a large free in the same process makes every page
"first" again, so a write from a pool not touched since runs at about 0.7 GB/s whatever the
store does, while an engine's pool is in constant use
(docs/benchmarks.md, "The kernel's first touch of a host pool").

  PYTHONPATH=build/python /usr/bin/python3 bench/sglang_vs_bench.py [--dir DIR] [--reps 3]
      [--mib 512] [--layouts files,segments] [--shapes llama-ps1,...] [--kvtier build/bin/kvtier]
      [--baseline REV] [--no-warm-memory] [--no-warm-reads] [--shared-store]
      [--uri 's3://BUCKET/PREFIX?endpoint=...']

--uri runs every side on another location instead of a local directory (e.g. the tests' S3
server: scripts/with-s3-server, credentials from its env file), each round under a prefix of
its own; `--layouts auto` leaves the layout to the store, as a new user's configuration does.
The bench's pages are cleared after each round; the adapter's stay under their prefix.
"""

import argparse
import hashlib
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import numpy  # noqa: E402
import torch  # noqa: E402

import kvtier.sglang as adapter_module  # noqa: E402
from fakes import HostPool, host_indices  # noqa: E402
from sglang_fakes import (  # noqa: E402
    HostPoolGroup, MambaPoolHost, PoolEntry, PoolHitPolicy, PoolName, PoolTransfer,
    storage_config)


MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0x08000)  # Python 3.10 lacks the name


def llama(ps):
    # Llama-3-8B: 32 layers, 8 KV heads of 128, bf16; SGLang's page_first host layout.
    return dict(kind="kv", layout="page_first", mla=False, page_size=ps, layers=32, heads=8,
                head_dim=128)


def deepseek(ps):
    # DeepSeek-V3 MLA: 61 layers of a 576-wide latent (512 + 64 rope), bf16.
    return dict(kind="kv", layout="page_first", mla=True, page_size=ps, layers=61,
                kv_lora_rank=512, qk_rope_head_dim=64)


SHAPES = {
    "llama-ps1": llama(1), "llama-ps16": llama(16), "llama-ps64": llama(64),
    "mla-ps1": deepseek(1), "mla-ps16": deepseek(16), "mla-ps64": deepseek(64),
    # bench/sglang_adapter.py's KV pool: 8 layers x 4 heads x 128, 64-token pages, 1 MiB.
    "adapter-bench": dict(kind="kv", layout="page_first_direct", mla=False, page_size=64,
                          layers=8, heads=4, head_dim=128),
    # A hybrid model's side pools through the v2 calls: Mamba state (1.05 MiB a slot, two
    # unequal pieces) and an SWA window (2 layers, 64-token pages, 256 KiB).
    "mamba-v2": dict(kind="mamba"),
    "swa-v2": dict(kind="swa"),
}


WARM_BYTES = 0  # --no-warm-memory: 0
WARM_READS = True  # --no-warm-reads: False
SHARED_STORE = False  # --shared-store: True
LOCATION = None  # --uri: every side's pages go under it instead of a local directory


def location_uri(directory):
    """Where a side of a round keeps its pages: the directory, or a prefix of --uri named
    after it."""
    if LOCATION is None:
        return f"file://{directory}"
    path, sep, query = LOCATION.partition("?")
    return f"{path.rstrip('/')}/{os.path.basename(directory)}{sep}{query}"


def warm_free_memory():
    """Syncs, then touches and frees WARM_BYTES of memory right before a timed write, so that
    no writeback of earlier data competes with it and the page cache it fills is handed
    memory freed a moment ago. On these VMs memory the host
    has taken back (free-page reporting) costs 5-10x more to fill than memory freed moments
    before, so without this a write's speed depends on what ran before it (who wrote or freed
    last), not on the code measured; every side gets it alike."""
    os.sync()  # and no writeback of what ran before competes with it
    if WARM_BYTES:
        numpy.ones(WARM_BYTES, dtype=numpy.uint8)


def before_timed_write(tensors):
    """What every side does right before a timed write: warm_free_memory(), then the pool
    touched (touch_pool); in this order, as a large free undoes the touch."""
    warm_free_memory()
    touch_pool(tensors)


def touch_pool(tensors):
    """Has the kernel read every page of `tensors` once (as bench.cc's touch_by_kernel does),
    then user code: an engine's host pool is read and written by the kernel and by the
    engine all the time, a pool filled by Python alone and then left while other memory was
    freed is not, and on these VMs the first access to a page after that costs ~6 us, from
    the kernel and from user code alike (the latter shows as user CPU time in the store's
    checksum of a write)."""
    fd = os.memfd_create("kvtier-bench-touch", os.MFD_CLOEXEC)
    try:
        for t in tensors:
            flat = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            for at in range(0, len(flat), 4 << 20):
                os.pwrite(fd, flat[at:at + (4 << 20)], 0)
            # and by user code (the store checksums what it writes): a byte of every page
            numpy.frombuffer(flat, dtype=numpy.uint8)[::4096].sum()
    finally:
        os.close(fd)


def pool_memory(pool):
    """The host memory tensors of a pool made by make_pool."""
    if hasattr(pool, "temporal_buffer"):
        return [pool.temporal_buffer, *pool.conv_buffer]
    return [pool.kv_buffer]


def keys_for(prefix, n):
    return [hashlib.sha256(f"{prefix}/{i}".encode()).hexdigest() for i in range(n)]


def page_bytes_of(shape):
    if shape["kind"] == "mamba":
        return MambaPoolHost(slots=1, layers=8, temporal_shape=(8, 64, 64),
                             conv_shapes=((3, 1024),), layout="page_first_direct") \
            .page_bytes(0).size
    if shape["kind"] == "swa":
        return 2 * 64 * 2 * 4 * 128 * 2
    pool = make_pool(shape, 1)
    return pool.page_bytes(0).size


def host_memory(t):
    """`t`'s shape and dtype in memory allocated the way SGLang allocates its host pools:
    alloc_mmap in python/sglang/srt/mem_cache/mmap_allocator.py (sgl-project/sglang@0db1171),
    an anonymous MAP_SHARED | MAP_POPULATE mapping (then cudaHostRegister'd, which needs a
    GPU), so pages start page-aligned. A plain torch.zeros of this size starts 64 bytes into a
    page, which costs reads into it about 15% at 8 MiB pages on this VM."""
    nbytes = t.numel() * t.element_size()
    mm = mmap.mmap(-1, (nbytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE,
                   flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | MAP_POPULATE,
                   prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return torch.frombuffer(mm, dtype=t.dtype, count=t.numel()).reshape(t.shape)


def make_pool(shape, pages):
    if shape["kind"] == "mamba":
        pool = MambaPoolHost(slots=pages, layers=8, temporal_shape=(8, 64, 64),
                             conv_shapes=((3, 1024),), layout="page_first_direct")
        pool.temporal_buffer = host_memory(pool.temporal_buffer)
        pool.conv_buffer = [host_memory(c) for c in pool.conv_buffer]
        pool.kv_buffer = [pool.temporal_buffer, *pool.conv_buffer]
        return pool
    if shape["kind"] == "swa":
        pool = HostPool(layout="page_first_direct", backing="torch", tokens=pages * 64,
                        page_size=64, layers=2, heads=4, head_dim=128)
    else:
        kw = {k: v for k, v in shape.items() if k not in ("kind", "page_size")}
        pool = HostPool(backing="torch", tokens=pages * shape["page_size"],
                        page_size=shape["page_size"], **kw)
    pool.kv_buffer = host_memory(pool.kv_buffer)
    return pool


class AdapterSide:
    """One shape's host pool(s), registered once with an adapter per round's directory."""

    def __init__(self, shape, pages, batch):
        self.shape = shape
        self.pages = pages
        self.batch = batch
        self.kind = shape["kind"]
        if self.kind == "kv":
            self.kv = make_pool(shape, pages)
            self.side = None
        else:  # side pools hang off a small KV pool, as in a hybrid model's group
            self.kv = HostPool(layout="page_first_direct", backing="torch", tokens=64,
                               page_size=64, layers=2, heads=4, head_dim=128)
            self.side = make_pool(shape, pages)
        target = self.kv if self.side is None else self.side
        target.fill_random(7)
        self.memory = pool_memory(target)
        self.reference = [target.page_bytes(self.start(i)).copy() for i in range(pages)]

    def start(self, page):
        if self.kind == "kv":
            return page * self.kv.page_size
        return page * 64 if self.kind == "swa" else page

    def open(self, directory, file_layout, module=adapter_module):
        config = storage_config(layout=self.kv.layout, mla=self.shape.get("mla", False))
        config.extra_config = {"interface_v1": True, "uri": location_uri(directory),
                               "file_layout": file_layout}
        b = module.HiCacheKvtier(config, {})
        if self.side is None:
            b.register_mem_pool_host(self.kv)
        else:
            name = PoolName.MAMBA if self.kind == "mamba" else PoolName.SWA
            group = HostPoolGroup([PoolEntry(PoolName.KV, self.kv, True),
                                   PoolEntry(name, self.side)])
            b.register_mem_pool_host(group)
            b.register_mem_host_pool_v2(self.side, name)
        return b

    def calls(self, b, write, keys, first):
        """The adapter call for pages [first, first + n) of the pool."""
        n = len(keys)
        if self.kind == "kv":
            idx = host_indices(range(first, first + n), self.kv.page_size) \
                if self.kv.page_size > 1 else torch.arange(first, first + n)
            fn = b.batch_set_v1 if write else b.batch_get_v1
            return lambda: fn(keys, idx)
        if self.kind == "mamba":
            name, idx = PoolName.MAMBA, torch.arange(first, first + n)
        else:
            name, idx = PoolName.SWA, host_indices(range(first, first + n), 64)
        t = [PoolTransfer(name, host_indices=idx, keys=keys,
                          hit_policy=PoolHitPolicy.ALL_PAGES)]
        fn = b.batch_set_v2 if write else b.batch_get_v2
        return lambda: fn(t)[name]

    def round(self, directory, file_layout, r, baseline=None):
        """The adapter's calls and the bare store's on the same pool (and, with `baseline`,
        that adapter module's calls), in the order of the round (alternating: whoever goes
        second finds the caches the first one left), each in a store of its own (own_store)."""
        times, layout = {}, None
        shared = self.open(directory, file_layout) if SHARED_STORE else None
        try:
            def store_of(module, d, io):
                if shared is not None and module is adapter_module:
                    return io(shared)
                return self.own_store(module, d, file_layout, io)

            steps = [lambda: store_of(adapter_module, directory,
                                      lambda b: self.adapter_io(b, r, times)),
                     lambda: store_of(adapter_module, directory + "-bare",
                                      lambda b: self.bare_io(b, r, times))]
            if baseline is not None:
                steps.append(lambda: store_of(
                    baseline, directory + "-baseline",
                    lambda b: self.adapter_io(b, r, times, prefix="baseline_")))
            for step in (steps if r % 2 == 0 else steps[::-1]):
                layout = step() or layout
            return times, layout
        finally:
            if shared is not None:
                shared.close()

    def own_store(self, module, directory, file_layout, io):
        """io(adapter) with an adapter of `module` on a directory of its own, removed
        afterwards: every side of a round starts as each `kvtier bench` process does, with an
        empty store and the pages of the side before it just deleted. Sharing one store, the
        side that wrote second ran 2-7x slower at DeepSeek MLA page_size 1 whichever it was,
        in the kernel's copy into new page-cache memory (first touches of memory the host had
        taken back), where the pages of a deleted store would have been reused
        (docs/benchmarks.md, "Each side of a round in a store of its own")."""
        b = self.open(directory, file_layout, module)
        try:
            return io(b)
        finally:
            b.close()
            shutil.rmtree(directory, ignore_errors=True)

    def adapter_io(self, b, r, times, prefix=""):
        pool = b._pools["kv" if self.side is None else
                        ("mamba" if self.kind == "mamba" else "swa")]
        layout = pool.stores[0].stats().get("layout") or "?"
        keys = keys_for(f"{self.kind}{r}", self.pages)
        for write in (True, False):
            if write:
                before_timed_write(self.memory)
            elif WARM_READS:  # as kvtier bench's warm_up(): the first batch into every slot
                for first in range(0, self.pages, self.batch):
                    n = min(self.batch, self.pages - first)
                    self.calls(b, False, keys[:n], first)()
            spent = 0.0
            for first in range(0, self.pages, self.batch):
                call = self.calls(b, write, keys[first:first + self.batch], first)
                t = time.perf_counter()
                ok = call()
                spent += time.perf_counter() - t
                assert all(ok), (write, ok)
            times[prefix + ("write" if write else "read")] = spent
        target = self.kv if self.side is None else self.side
        for i in range(self.pages):  # untimed: every byte as written
            assert (target.page_bytes(self.start(i)) == self.reference[i]).all(), i
        return layout

    def bare_io(self, b, r, times):
        """The same pages through the adapter's own store with the pieces worked out
        beforehand: the store's speed on this pool's memory, without the adapter."""
        pool = b._pools["kv" if self.side is None else
                        ("mamba" if self.kind == "mamba" else "swa")]
        bare_keys = keys_for(f"bare-{self.kind}{r}", self.pages)
        plan = []
        for first in range(0, self.pages, self.batch):
            n = min(self.batch, self.pages - first)
            if self.kind == "swa" or (self.kind == "kv" and self.kv.page_size > 1):
                idx = host_indices(range(first, first + n), pool.page_size)
            else:
                idx = torch.arange(first, first + n)
            ptrs, sizes = pool.page_meta(adapter_module._Indices.of(idx))
            plan.append((bare_keys[first:first + n], ptrs, sizes))
        store = pool.stores[0]
        for op, call in (("bare_write", store.batch_put_pieces),
                         ("bare_read", store.batch_get_pieces)):
            if op == "bare_write":
                before_timed_write(self.memory)
            elif WARM_READS:  # as kvtier bench's warm_up(): the first batch into every slot
                for k, ptrs, sizes in plan:
                    call(plan[0][0][:len(k)], ptrs, sizes)
            spent = 0.0
            for k, ptrs, sizes in plan:
                t = time.perf_counter()
                result = call(k, ptrs, sizes)
                spent += time.perf_counter() - t
                assert result.all_ok, op
            times[op] = spent


def bench_round(kvtier_bin, directory, page_bytes, pages, batch, file_layout, pool_pages=0):
    warm_free_memory()
    out = subprocess.run([kvtier_bin, "bench", "--uri", location_uri(directory), "--page-bytes",
                          str(page_bytes), "--pages", str(pages), "--batch", str(batch),
                          "--layout", file_layout, "--pool-pages", str(pool_pages),
                          "--json", "--quiet"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    assert j["verified"], j
    total = page_bytes * pages
    return {"write": total / (j["write_gbps"] * 1e9), "read": total / (j["read_gbps"] * 1e9)}, \
        j.get("layout_choice", j["layout"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--layouts", default="files,segments")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--kvtier", default=os.path.join(HERE, "..", "build", "bin", "kvtier"))
    ap.add_argument("--json", action="store_true", help="also print the rows as JSON")
    ap.add_argument("--no-warm-memory", action="store_true",
                    help="do not touch and free the data's size of memory before each write")
    ap.add_argument("--no-warm-reads", action="store_true",
                    help="no untimed read of a batch into every pool slot before the adapter's "
                         "and the bare store's timed reads (kvtier bench always does one)")
    ap.add_argument("--shared-store", action="store_true",
                    help="the adapter and the bare store write into one store per round, one "
                         "after the other (the method before 2026-12-05, last), instead of "
                         "each into a store of its own deleted after it")
    ap.add_argument("--uri", default=None,
                    help="a store location (e.g. s3://...) instead of a local directory")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also run the adapter of this git revision, taking turns with this one")
    args = ap.parse_args()
    global WARM_BYTES, WARM_READS, SHARED_STORE, LOCATION
    WARM_READS = not args.no_warm_reads
    SHARED_STORE = args.shared_store
    WARM_BYTES = 0 if args.no_warm_memory else (args.mib << 20) + (256 << 20)
    LOCATION = args.uri
    baseline = None
    if args.baseline:
        from sglang_adapter import load_baseline  # bench/sglang_adapter.py

        baseline = load_baseline(args.baseline)
    directory = args.dir or tempfile.mkdtemp(prefix="kvtier-sglang-vs-bench-")
    layouts = args.layouts.split(",")
    rows = []
    load = [os.getloadavg()[0]]
    try:
        for name in args.shapes.split(","):
            shape = SHAPES[name]
            page = page_bytes_of(shape)
            pages = max(4, (args.mib << 20) // page)
            batch = min(args.batch, pages)
            side = AdapterSide(shape, pages, batch)
            for file_layout in layouts:
                got = {who: {"write": [], "read": []}
                       for who in ("adapter", "bench", "bench_pool", "bare", "baseline")}
                chosen = {}
                for r in range(-1, args.reps):  # round -1 warms both up, uncounted
                    order = ("adapter", "bench", "bench_pool") if r % 2 == 0 else \
                        ("bench_pool", "bench", "adapter")
                    for who in order:
                        d = os.path.join(directory, f"{name}-{file_layout}-{who}-{r}")
                        if who == "adapter":
                            times, chosen[who] = side.round(d, file_layout, r, baseline)
                        else:
                            times, chosen[who] = bench_round(
                                args.kvtier, d, page, pages, batch, file_layout,
                                pages if who == "bench_pool" else 0)
                        shutil.rmtree(d, ignore_errors=True)
                        if r < 0:
                            continue
                        for op in ("write", "read"):
                            got[who][op].append(page * pages / times[op] / 1e9)
                            for other in ("bare", "baseline"):
                                if f"{other}_{op}" in times:
                                    got[other][op].append(
                                        page * pages / times[f"{other}_{op}"] / 1e9)
                row = {"shape": name, "page_bytes": page, "pages": pages, "batch": batch,
                       "layout": file_layout, "adapter_layout": chosen["adapter"],
                       "bench_layout": chosen["bench"]}
                for op in ("write", "read"):
                    a, b = got["adapter"][op], got["bench"][op]
                    c = got["bare"][op]
                    e = got["bench_pool"][op]
                    row[op] = {"adapter": statistics.median(a), "bench": statistics.median(b),
                               "bare": statistics.median(c), "bench_pool": statistics.median(e),
                               "pool_ratios": [x / y for x, y in zip(a, e)],
                               "adapter_range": (min(a), max(a)), "bench_range": (min(b), max(b)),
                               "ratios": [x / y for x, y in zip(a, b)],
                               "bare_ratios": [x / y for x, y in zip(a, c)]}
                    if got["baseline"][op]:
                        f = got["baseline"][op]
                        row[op]["baseline"] = statistics.median(f)
                        row[op]["baseline_ratios"] = [x / y for x, y in zip(a, f)]
                rows.append(row)
                load.append(os.getloadavg()[0])
                print_row(row)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"{args.reps} rounds, alternating order; load average (1 min) "
          f"{min(load):.2f}-{max(load):.2f}")
    if args.json:
        print(json.dumps(rows))


def print_row(row):
    print(f"{row['shape']} ({row['page_bytes']} B x {row['pages']}, batch {row['batch']}), "
          f"{row['layout']}: adapter got {row['adapter_layout']}", flush=True)
    for op in ("write", "read"):
        d = row[op]
        print(f"  {op:5} adapter {d['adapter']:6.2f} GB/s | kvtier bench {d['bench']:6.2f}: "
              f"{d['adapter'] / d['bench']:4.2f}x ({min(d['ratios']):.2f}-"
              f"{max(d['ratios']):.2f}) | bench --pool-pages {row['pages']} "
              f"{d['bench_pool']:6.2f}: {d['adapter'] / d['bench_pool']:4.2f}x "
              f"({min(d['pool_ratios']):.2f}-{max(d['pool_ratios']):.2f}) | bare store "
              f"{d['bare']:6.2f}: {d['adapter'] / d['bare']:4.2f}x "
              f"({min(d['bare_ratios']):.2f}-{max(d['bare_ratios']):.2f})"
              + (f" | baseline adapter {d['baseline']:6.2f}: "
                 f"{d['adapter'] / d['baseline']:4.2f}x ({min(d['baseline_ratios']):.2f}-"
                 f"{max(d['baseline_ratios']):.2f})" if "baseline" in d else ""), flush=True)


if __name__ == "__main__":
    main()
