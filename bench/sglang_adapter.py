#!/usr/bin/env python3
"""The SGLang adapter through SGLang's call order: what hybrid pools cost, and what the v1
path's skip-if-present and stop-at-first-miss save.

  hybrid   backup and prefetch of a hybrid model (KV + Mamba state + SWA window) through the
           controller's order (batch_set_v2 then KV v1; batch_exists_v2, KV v1, batch_get_v2),
           against the KV-only path on the same KV pages. Reports the side pools' time and
           bytes, and the time they would take at the KV path's GB/s.
  v1       this adapter against the previous one (git revision --baseline, loaded from git):
           a rewrite of 128 pages already stored, and a read of 128 pages with a hole at 8.

Pages land in --dir (page-cache hot: the numbers are the adapter's and the store's CPU path,
not a disk's). Medians over --reps rounds.

  PYTHONPATH=build/python /usr/bin/python3 bench/sglang_adapter.py [--dir DIR] [--reps 5]
      [--baseline ff074c2] [--only hybrid|v1]
      [--file-layout files|segments|auto]
"""

import argparse
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
    Driver, HostPoolGroup, MambaPoolHost, PoolEntry, PoolHitPolicy, PoolName, PoolTransfer,
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


def one_pool_after_another():
    """Makes batch_get_v2/batch_set_v2 run each pool's batch to completion before the next
    (as before their batches overlapped), for the comparison."""
    def start_io(self, write, keys, host_indices, starts):
        statuses = self.io(write, keys, host_indices, starts)
        return lambda: statuses
    current._Pool.start_io = start_io


def bench_hybrid(directory, reps):
    kv = kv_pool()
    mamba, swa = side_pools()
    group = HostPoolGroup([PoolEntry(PoolName.KV, kv, True), PoolEntry(PoolName.MAMBA, mamba),
                           PoolEntry(PoolName.SWA, swa)])
    b = make(current, directory, group, [(PoolName.MAMBA, mamba), (PoolName.SWA, swa)],
             FILE_LAYOUT)
    d = Driver(b, PS)
    kv_bytes = PAGES * kv.page_bytes(0).size
    mamba_bytes = mamba.page_bytes(0).size
    swa_bytes = 4 * swa.page_bytes(0).size
    rows = {k: [] for k in ("kv_set", "side_set", "kv_get", "side_exists", "side_get",
                            "kv_exists", "kv_get_again", "side_get_again")}
    for r in range(reps):
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
    b.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    side = mamba_bytes + swa_bytes
    print(f"hybrid: {PAGES} KV pages of {kv_bytes // PAGES} B; side pools per request: Mamba "
          f"{mamba_bytes} B (1 slot, 2 unequal pieces) + SWA {swa_bytes} B (4 pages): "
          f"{100 * side / kv_bytes:.2f}% of the KV bytes")
    for op, kvk, sk in (("backup", "kv_set", "side_set"), ("prefetch", "kv_get", "side_get"),
                        ("again", "kv_get_again", "side_get_again")):
        gbs = kv_bytes / med[kvk] / 1e9
        at_kv_rate = side / (kv_bytes / med[kvk])
        print(f"  {op:8}: KV {med[kvk] * 1e3:7.2f} ms ({gbs:5.2f} GB/s); side pools "
              f"{med[sk] * 1e3:6.2f} ms ({side / med[sk] / 1e9:5.2f} GB/s), "
              f"{at_kv_rate * 1e3:5.2f} ms at the KV rate; hybrid/KV-only "
              f"{(med[kvk] + med[sk]) / med[kvk]:.3f}x")
    print(f"  exists  : batch_exists {med['kv_exists'] * 1e6:6.0f} us, batch_exists_v2 with "
          f"both pools {med['side_exists'] * 1e6:6.0f} us")


def load_baseline(rev):
    text = subprocess.run(["git", "-C", HERE, "show", f"{rev}:python/kvtier/sglang.py"],
                          check=True, capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "kvtier_sglang_baseline.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("kvtier_sglang_baseline", path)
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
    ap.add_argument("--only", choices=("hybrid", "v1"), default=None)
    ap.add_argument("--file-layout", choices=("files", "segments", "auto"), default=None,
                    help="the adapter's file_layout (hybrid only; the v1 baseline predates it)")
    args = ap.parse_args()
    global FILE_LAYOUT
    FILE_LAYOUT = args.file_layout or ""
    directory = args.dir or tempfile.mkdtemp(prefix="kvtier-sglang-bench-")
    try:
        if args.only in (None, "hybrid"):
            bench_hybrid(os.path.join(directory, "hybrid"), args.reps)
        if args.only in (None, "v1"):
            bench_v1(os.path.join(directory, "v1"), args.reps, load_baseline(args.baseline))
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
