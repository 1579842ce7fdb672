#!/usr/bin/env python3
"""The SGLang adapter through SGLang's call order: what hybrid pools cost, and what the v1
path's skip-if-present and stop-at-first-miss save.

  hybrid   backup and prefetch of a hybrid model (KV + Mamba state + SWA window) through the
           controller's order (batch_set_v2 then KV v1; batch_exists_v2, KV v1, batch_get_v2),
           against the KV-only path on the same KV pages. Reports the side pools' time and
           bytes, the time they would take at the KV path's GB/s, and the floor: the same
           side-pool pages read right after the same KV read through the bare store bindings
           (one batch_get_pieces per pool, into the same host memory, no adapter); and the
           machine's floor: the same bytes read right after the same KV read with one plain
           preadv per page object from files in the page cache (no kvtier, no checksum). With
           --hybrid-baseline REV the adapter of that git revision runs beside this one, the
           two taking turns round by round.
  v1       this adapter against the previous one (git revision --baseline, loaded from git):
           a rewrite of 128 pages already stored, and a read of 128 pages with a hole at 8.

Pages land in --dir (page-cache hot: the numbers are the adapter's and the store's CPU path,
not a disk's). Medians over --reps rounds.

  PYTHONPATH=build/python /usr/bin/python3 bench/sglang_adapter.py [--dir DIR] [--reps 5]
      [--baseline ff074c2] [--hybrid-baseline REV] [--only hybrid|v1]
      [--file-layout files|segments|auto]
"""

import argparse
import ctypes
import hashlib
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import torch  # noqa: E402

import kvtier.sglang as current  # noqa: E402
from fakes import HostPool, host_indices  # noqa: E402
from sglang_fakes import (  # noqa: E402
    HostPoolGroup, MambaPoolHost, PoolEntry, PoolHitPolicy, PoolName, PoolTransfer,
    placeholder_keys, storage_config)

PAGES = 128
PS = 64


def keys_for(prefix, n):
    return [hashlib.sha256(f"{prefix}/{i}".encode()).hexdigest() for i in range(n)]


def kv_pool():
    # 8 layers x 4 KV heads x 128 dims, bf16, 64-token pages: 1 MiB a page (K and V 512 KiB).
    p = HostPool(layout="page_first_direct", backing="torch", tokens=2 * PAGES * PS,
                 page_size=PS, layers=8, heads=4, head_dim=128)
    p.fill_random(1)
    return p


def side_pools():
    # Mamba: 8 layers of a 8x64x64 fp32 state and a 3x1024 bf16 conv state (~1.05 MiB a slot);
    # SWA: 2 layers of the KV's heads (256 KiB a page), a window of 4 pages.
    mamba = MambaPoolHost(slots=8, layers=8, temporal_shape=(8, 64, 64),
                          conv_shapes=((3, 1024),), layout="page_first_direct")
    swa = HostPool(layout="page_first_direct", backing="torch", tokens=16 * PS, page_size=PS,
                   layers=2, heads=4, head_dim=128)
    mamba.fill_random(2)
    swa.fill_random(3)
    return mamba, swa


FILE_LAYOUT = ""  # --file-layout: the adapter's file_layout option ("" = its default)


def make(module, directory, group, pools, file_layout=""):
    config = storage_config(layout="page_first_direct")
    config.extra_config = {"uri": f"file://{directory}", "backend": "posix"}
    if file_layout:
        config.extra_config["file_layout"] = file_layout
    b = module.HiCacheKvtier(config, {})
    b.register_mem_pool_host(group)
    if hasattr(b, "register_mem_host_pool_v2"):
        for name, pool in pools:
            b.register_mem_host_pool_v2(pool, name)
    return b


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


class HybridRun:
    """One adapter (a module: this one or a baseline) with its own pools and directory, run
    through SGLang's order one round at a time, so that adapters can take turns."""

    def __init__(self, label, module, directory, floor=False):
        self.label = label
        self.kv = kv_pool()
        self.mamba, self.swa = side_pools()
        group = HostPoolGroup([PoolEntry(PoolName.KV, self.kv, True),
                               PoolEntry(PoolName.MAMBA, self.mamba),
                               PoolEntry(PoolName.SWA, self.swa)])
        self.b = make(module, directory, group,
                      [(PoolName.MAMBA, self.mamba), (PoolName.SWA, self.swa)], FILE_LAYOUT)
        self.floor = floor
        self.rows = {k: [] for k in ("kv_set", "side_set", "kv_get", "side_exists", "side_get",
                                     "kv_exists", "kv_get_again", "side_get_again",
                                     "kv_get_floor", "side_floor", "kv_get_machine",
                                     "side_machine")}
        self.directory = directory
        self.fds = []

    def side_pieces(self):
        """[(pool name, [(ptrs, sizes) of each page])]: where a prefetch puts the side pools'
        pages (Mamba slot 5, SWA pages 8-11), as the pools describe them."""
        return [("mamba", [self.mamba.get_page_buffer_meta(torch.tensor([5]))]),
                ("swa", [self.swa.get_page_buffer_meta(host_indices([s], PS))
                         for s in (8, 9, 10, 11)])]

    def floor_read(self, keys):
        """The side pools' pages of a request read through the bare store bindings into the
        same host memory: one batch_get_pieces per pool's namespace, no adapter."""
        calls = []
        for name, pages in self.side_pieces():
            ptrs = [p for page_ptrs, _ in pages for p in page_ptrs]
            sizes = [z for _, page_sizes in pages for z in page_sizes]
            calls.append((self.b._pools[name].stores[0], keys[-len(pages):], ptrs, sizes))

        def read():
            return [store.batch_get_pieces(k, p, z).pages for store, k, p, z in calls]
        return read

    def machine_read(self):
        """The same side-pool bytes without kvtier: each page object a plain file (written
        once, page cache hot), read with one os.preadv into the page's pieces in the same
        host memory. What copying those bytes costs this machine on one thread."""
        if not self.fds:
            os.makedirs(os.path.join(self.directory, "machine"), exist_ok=True)
        views = []
        pages = [page for _, pool_pages in self.side_pieces() for page in pool_pages]
        for n, (ptrs, sizes) in enumerate(pages):
            bufs = [memoryview((ctypes.c_char * int(z)).from_address(int(p))).cast("B")
                    for p, z in zip(ptrs, sizes)]
            if len(self.fds) <= n:
                path = os.path.join(self.directory, "machine", f"page{n}")
                with open(path, "wb") as f:
                    for buf in bufs:
                        f.write(buf)
                self.fds.append(os.open(path, os.O_RDONLY))
            views.append((self.fds[n], bufs, sum(sizes)))

        def read():
            return [os.preadv(fd, bufs, 0) == total for fd, bufs, total in views]
        return read

    def round(self, r):
        b, rows = self.b, self.rows
        keys = keys_for(f"hyb{r}", PAGES)
        side = [PoolTransfer(PoolName.MAMBA, host_indices=torch.tensor([1]), keys=keys[-1:],
                             hit_policy=PoolHitPolicy.TRAILING_PAGES),
                PoolTransfer(PoolName.SWA, host_indices=host_indices([0, 1, 2, 3], PS),
                             keys=keys[-4:], hit_policy=PoolHitPolicy.TRAILING_PAGES)]
        kvi = host_indices(range(PAGES), PS)
        t, _ = timed(lambda: b.batch_set_v2(side))
        rows["side_set"].append(t)
        t, ok = timed(lambda: b.batch_set_v1(keys, kvi))
        assert all(ok)
        rows["kv_set"].append(t)
        # prefetch into other slots
        ph = [PoolTransfer(PoolName.MAMBA, host_indices=torch.tensor([5]),
                           keys=placeholder_keys(1), hit_policy=PoolHitPolicy.TRAILING_PAGES),
              PoolTransfer(PoolName.SWA, host_indices=host_indices([8, 9, 10, 11], PS),
                           keys=placeholder_keys(4), hit_policy=PoolHitPolicy.TRAILING_PAGES)]
        t, res = timed(lambda: b.batch_exists_v2(keys, ph))
        assert res.kv_hit_pages == PAGES
        rows["side_exists"].append(t)
        t, n = timed(lambda: b.batch_exists(keys))
        rows["kv_exists"].append(t)
        dst = host_indices(range(PAGES, 2 * PAGES), PS)
        ph[0].keys, ph[1].keys = keys[-1:], keys[-4:]
        for again in ("", "_again"):  # the first prefetch of fresh pages, then a second one
            t, ok = timed(lambda: b.batch_get_v1(keys, dst))
            assert all(ok)
            rows["kv_get" + again].append(t)
            t, res = timed(lambda: b.batch_get_v2(ph))
            assert all(all(v) for v in res.values())
            rows["side_get" + again].append(t)
        if self.floor:
            read = self.floor_read(keys)
            t, ok = timed(lambda: b.batch_get_v1(keys, dst))
            assert all(ok)
            rows["kv_get_floor"].append(t)
            t, pages = timed(read)
            assert all(all(p) for p in pages)
            rows["side_floor"].append(t)
            read = self.machine_read()
            t, ok = timed(lambda: b.batch_get_v1(keys, dst))
            assert all(ok)
            rows["kv_get_machine"].append(t)
            t, ok = timed(read)
            assert all(ok)
            rows["side_machine"].append(t)

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.b.close()


def spread(values, scale=1e3):
    return f"{statistics.median(values) * scale:.2f} ({min(values) * scale:.2f}-" \
           f"{max(values) * scale:.2f})"


def bench_hybrid(directory, reps, baseline=None):
    runs = [HybridRun("current", current, os.path.join(directory, "current"), floor=True)]
    if baseline is not None:
        runs.append(HybridRun("previous", baseline, os.path.join(directory, "previous")))
    load = [os.getloadavg()[0]]
    for r in range(reps):  # the adapters take turns, in alternating order
        for run in (runs if r % 2 == 0 else runs[::-1]):
            run.round(r)
        load.append(os.getloadavg()[0])
    for run in runs:
        run.close()
    kv = runs[0].kv
    kv_bytes = PAGES * kv.page_bytes(0).size
    mamba_bytes = runs[0].mamba.page_bytes(0).size
    swa_bytes = 4 * runs[0].swa.page_bytes(0).size
    side = mamba_bytes + swa_bytes
    print(f"hybrid: {PAGES} KV pages of {kv_bytes // PAGES} B; side pools per request: Mamba "
          f"{mamba_bytes} B (1 slot, 2 unequal pieces) + SWA {swa_bytes} B (4 pages): "
          f"{100 * side / kv_bytes:.2f}% of the KV bytes; {reps} rounds, "
          f"file layout {FILE_LAYOUT or 'default'}; load average (1 min) "
          f"{min(load):.2f}-{max(load):.2f}")
    print("  times in ms: median (min-max) over rounds; ratios: of the medians (min-max of "
          "the rounds')")

    def ratio(kv_times, side_times):
        per_round = [(k + s) / k for k, s in zip(kv_times, side_times)]
        med = (statistics.median(kv_times) + statistics.median(side_times)) / \
            statistics.median(kv_times)
        return f"{med:.3f}x ({min(per_round):.3f}-{max(per_round):.3f})"

    steps = [("backup", "kv_set", "side_set"), ("prefetch", "kv_get", "side_get"),
             ("again", "kv_get_again", "side_get_again")]
    for run in runs:
        rows = run.rows
        print(f"  [{run.label}]")
        for op, kvk, sk in steps + ([("floor", "kv_get_floor", "side_floor"),
                                     ("machine", "kv_get_machine", "side_machine")]
                                    if run.floor else []):
            kv_med = statistics.median(rows[kvk])
            side_med = statistics.median(rows[sk])
            what = {"floor": "bare store", "machine": "plain preadv"}.get(op, "side pools")
            print(f"    {op:8}: KV {spread(rows[kvk])} ms ({kv_bytes / kv_med / 1e9:5.2f} GB/s); "
                  f"{what} {spread(rows[sk])} ms ({side / side_med / 1e9:5.2f} GB/s), "
                  f"{side / (kv_bytes / kv_med) * 1e3:.2f} ms at the KV rate; hybrid/KV-only "
                  f"{ratio(rows[kvk], rows[sk])}")
        print(f"    exists  : batch_exists {statistics.median(rows['kv_exists']) * 1e6:.0f} us, "
              f"batch_exists_v2 with both pools "
              f"{statistics.median(rows['side_exists']) * 1e6:.0f} us")
    floor = runs[0].rows["side_floor"]
    fm = statistics.median(floor)
    mm = statistics.median(runs[0].rows["side_machine"])
    print(f"  byte share: {(kv_bytes + side) / kv_bytes:.3f}x")
    print(f"  bare store / plain preadv {fm / mm:.2f}x (above the machine's floor by "
          f"{(fm - mm) * 1e6:.0f} us)")
    for run in runs:
        for op in ("side_get", "side_get_again"):
            med = statistics.median(run.rows[op])
            print(f"  {run.label} {op}: adapter / bare store {med / fm:.2f}x (above the "
                  f"floor by {(med - fm) * 1e6:.0f} us)")


def load_baseline(rev):
    text = subprocess.run(["git", "-C", HERE, "show", f"{rev}:python/kvtier/sglang.py"],
                          check=True, capture_output=True, text=True).stdout
    name = "kvtier_sglang_" + "".join(c if c.isalnum() else "_" for c in rev)
    path = os.path.join(tempfile.mkdtemp(), name + ".py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def bench_v1(directory, reps, baseline):
    results = {}
    for label, module in (("previous", baseline), ("current", current)):
        d = os.path.join(directory, label)
        kv = kv_pool()
        b = make(module, d, kv, [])
        rewrite, holed = [], []
        for r in range(reps):
            keys = keys_for(f"v1{r}", PAGES)
            kvi = host_indices(range(PAGES), PS)
            assert all(b.batch_set_v1(keys, kvi))
            t, ok = timed(lambda: b.batch_set_v1(keys, kvi))  # DP replica writes again
            assert all(ok)
            rewrite.append(t)
            b._store.remove(keys[8])
            dst = host_indices(range(PAGES, 2 * PAGES), PS)
            t, ok = timed(lambda: b.batch_get_v1(keys, dst))
            assert ok[:8] == [True] * 8 and not ok[8]
            holed.append(t)
        b.close()
        results[label] = (statistics.median(rewrite), statistics.median(holed))
    print(f"v1: {PAGES} pages of 1 MiB")
    for label, (rw, hole) in results.items():
        print(f"  {label:8}: rewrite of stored pages {rw * 1e3:7.2f} ms, "
              f"read with a hole at page 8 {hole * 1e3:7.2f} ms")
    (rw0, h0), (rw1, h1) = results["previous"], results["current"]
    print(f"  speed-up: rewrite {rw0 / rw1:.0f}x, holed read {h0 / h1:.1f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", default="ff074c2")
    ap.add_argument("--hybrid-baseline", default=None, metavar="REV",
                    help="also run the hybrid rounds with the adapter of this git revision")
    ap.add_argument("--only", choices=("hybrid", "v1"), default=None)
    ap.add_argument("--file-layout", choices=("files", "segments", "auto"), default=None,
                    help="the adapter's file_layout (hybrid only; the v1 baseline predates it)")
    args = ap.parse_args()
    global FILE_LAYOUT
    FILE_LAYOUT = args.file_layout or ""
    directory = args.dir or tempfile.mkdtemp(prefix="kvtier-sglang-bench-")
    try:
        if args.only in (None, "hybrid"):
            baseline = load_baseline(args.hybrid_baseline) if args.hybrid_baseline else None
            bench_hybrid(os.path.join(directory, "hybrid"), args.reps, baseline)
        if args.only in (None, "v1"):
            bench_v1(os.path.join(directory, "v1"), args.reps, load_baseline(args.baseline))
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
