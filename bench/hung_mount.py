#!/usr/bin/env python3
"""What a hung mount costs, and what isolating the I/O costs when nothing hangs.

1. Two roots, one hung (docs/benchmarks.md, "A hung mount"): a store on two kvtier_hangfs
   mounts (src/testing/hangfs.cc: pass-through FUSE whose operations block on command) reads
   batches of --batch pages spread over both. Rounds alternate between "both answering" and
   "root A hung" (A hung from the round's first call; the store learns it on that call, which
   waits for the deadline); each round ends with A released and answering again. Reported:
   batch latency p50/p99/max of each state, the deadline slack (how far past deadline_ms the
   first call on the hung root returned), and the GB/s of root B's pages while A hangs against
   a store on B alone reading the same pages (B's pages of each batch), alternating.
2. Staging (isolate=on against isolate=off), on each directory of --staging-dirs (a local
   disk, a CephFS mount, ...): write then read --mib MiB of --page-kib pages, the two settings
   taking turns round by round; GB/s and the ratio.

Needs root and /dev/fuse for part 1 (skipped otherwise, saying why), and the kvtier Python
module (PYTHONPATH=build/python) with build/tests/kvtier_hangfs.

  PYTHONPATH=build/python /usr/bin/python3 bench/hung_mount.py [--rounds 5] [--batch 128]
      [--page-kib 128] [--deadline-ms 500] [--staging-dirs /tmp,fuse,/mnt/cephfs/x] [--mib 512]
      [--cross /mnt/a/x,/mnt/b/x]
"""

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy

import kvtier

HERE = os.path.dirname(os.path.abspath(__file__))
HANGFS = os.path.join(HERE, "..", "build", "tests", "kvtier_hangfs")
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
from hangfs import HangFs  # noqa: E402


def mount(root):
    fs = HangFs(HANGFS, root)
    if not fs.mounted:
        raise RuntimeError("kvtier_hangfs could not mount")
    return fs



def keys_for(prefix, n):
    return [hashlib.sha256(f"{prefix}/{i}".encode()).hexdigest() for i in range(n)]


def open_store(uri, page):
    return kvtier.Store(uri, model="hung-mount-bench", dtype="bfloat16", layout="page_first",
                        page_tokens=1, piece_bytes=page, pieces_per_page=1)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def hung_root(args):
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("part 1 skipped: mounting FUSE needs root and /dev/fuse")
        return
    if not os.path.exists(HANGFS):
        print(f"part 1 skipped: {HANGFS} is not built (libfuse3-dev)")
        return
    page = args.page_kib << 10
    root = tempfile.mkdtemp(prefix="kvtier-hung-")
    a, b = mount(os.path.join(root, "a")), mount(os.path.join(root, "b"))
    try:
        uri = (f"file://{a.mount}/kv,{b.mount}/kv?deadline_ms={args.deadline_ms}"
               f"&probe_interval_ms={args.probe_ms}")
        both = open_store(uri, page)
        alone = open_store(f"file://{b.mount}/kv?deadline_ms={args.deadline_ms}", page)
        n = args.batch * args.batches
        pool = numpy.zeros(2 * n * page, dtype=numpy.uint8)
        pool[: n * page] = numpy.random.default_rng(1).integers(0, 255, n * page, dtype=numpy.uint8)
        keys = keys_for("hung", n)
        src = [pool[i * page:(i + 1) * page] for i in range(n)]
        dst = [pool[(n + i) * page:(n + i + 1) * page] for i in range(n)]
        lat = {"both answering": [], "root A hung": []}
        slack, hung_b, alone_b = [], [], []
        with both.register_memory(pool), alone.register_memory(pool):
            for c in range(0, n, args.batch):
                put = both.batch_put(keys[c:c + args.batch], src[c:c + args.batch])
                assert put.all_ok, [str(s) for s in put.pages if not s][:3]
            # Which pages live on B: the store on B alone finds exactly those.
            on_b = [i for i in range(n) if alone.exists(keys[i])]
            for r in range(args.rounds):
                for state in (("both answering", "root A hung") if r % 2 == 0 else
                              ("root A hung", "both answering")):
                    hung = state == "root A hung"
                    if hung:
                        a.hang()
                    ok_bytes, busy = 0, 0.0
                    for c in range(args.batches):
                        sl = slice(c * args.batch, (c + 1) * args.batch)
                        t0 = time.perf_counter()
                        res = both.batch_get(keys[sl], dst[sl])
                        dt = time.perf_counter() - t0
                        lat[state].append(dt * 1e3)
                        if hung and c == 0:
                            slack.append(dt * 1e3 - args.deadline_ms)
                        elif hung:
                            busy += dt
                            ok_bytes += sum(1 for s in res.pages if s) * page
                    if hung:
                        hung_b.append(ok_bytes / busy / 1e9)
                        a.release()
                        while both.stats()["locations_unhealthy"] or \
                                both.stats()["threads_stuck"]:
                            time.sleep(0.005)
                # Root B alone, the same pages of each batch (those on B), in the same round.
                busy = 0.0
                for c in range(1, args.batches):
                    sl = [i for i in on_b if c * args.batch <= i < (c + 1) * args.batch]
                    t0 = time.perf_counter()
                    res = alone.batch_get([keys[i] for i in sl], [dst[i] for i in sl])
                    busy += time.perf_counter() - t0
                    assert res.all_ok
                alone_b.append(sum(1 for i in on_b if i >= args.batch) * page / busy / 1e9)
        both.close()
        alone.close()
    finally:
        a.close()
        b.close()
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n## Two roots, one hung: {args.batches} batches of {args.batch} pages of "
          f"{args.page_kib} KiB per state and round, {args.rounds} rounds, deadline "
          f"{args.deadline_ms} ms")
    print("| state | batches | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for state, v in lat.items():
        print(f"| {state} | {len(v)} | {pct(v, 0.5):.2f} | {pct(v, 0.99):.2f} | {max(v):.2f} |")
    print(f"\nfirst call on the hung root: returned {statistics.median(slack):.1f} ms past the "
          f"deadline (median; max {max(slack):.1f} ms)")
    ratio = [h / al for h, al in zip(hung_b, alone_b)]
    print(f"root B's pages while A hangs: {statistics.median(hung_b):.2f} GB/s; B alone "
          f"{statistics.median(alone_b):.2f} GB/s; ratio {statistics.median(ratio):.2f}x "
          f"(per round: {', '.join(f'{x:.2f}' for x in ratio)})")


def staging(args):
    page = args.page_kib << 10
    n = (args.mib << 20) // page
    print(f"\n## Isolation's staging: isolate=on against off, {n} pages of {args.page_kib} KiB, "
          f"{args.rounds} rounds, alternating")
    print("| directory | filesystem | write on/off | read on/off | read floor |")
    print("|---|---|---|---|---|")
    mounts = []
    for d in [x for x in args.staging_dirs.split(",") if x]:
        if d == "fuse":  # a pass-through FUSE mount over the temporary directory
            if os.geteuid() != 0 or not os.path.exists(HANGFS):
                print("| fuse | (skipped: needs root and kvtier_hangfs) | | |")
                continue
            mounts.append(mount(tempfile.mkdtemp(prefix="kvtier-fuse-")))
            d = mounts[-1].mount
        pool = numpy.random.default_rng(2).integers(0, 255, 2 * n * page, dtype=numpy.uint8)
        src = [pool[i * page:(i + 1) * page] for i in range(n)]
        dst = [pool[(n + i) * page:(n + i + 1) * page] for i in range(n)]
        res = {"on": ([], []), "off": ([], [])}
        ring = numpy.zeros(16 << 20, dtype=numpy.uint8)  # a job's staging: 16 MiB
        copy_s = []
        fs = subprocess.run(["stat", "-f", "-c", "%T", d], capture_output=True,
                            text=True).stdout.strip()
        # One store per mode, open for the whole run (staging is allocated once, as in a
        # serving engine); fresh keys every round; round 0 warms up and is not counted.
        stores = {m: open_store(f"file://{os.path.join(d, f'staging-{m}')}?isolate={m}", page)
                  for m in ("on", "off")}
        regs = [st.register_memory(pool) for st in stores.values()]
        for r in range(args.rounds + 1):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                s = stores[mode]
                keys = keys_for(f"staging-{r}-{mode}", n)
                t0 = time.perf_counter()
                for c in range(0, n, args.batch):
                    assert s.batch_put(keys[c:c + args.batch], src[c:c + args.batch]).all_ok
                wrote = time.perf_counter() - t0
                t0 = time.perf_counter()
                for c in range(0, n, args.batch):
                    assert s.batch_get(keys[c:c + args.batch], dst[c:c + args.batch]).all_ok
                if r > 0:
                    res[mode][0].append(n * page / wrote / 1e9)
                    res[mode][1].append(n * page / (time.perf_counter() - t0) / 1e9)
                s.clear()
            # The floor: one copy of every byte read (staging to the pages), timed alone.
            per = len(ring) // page
            t0 = time.perf_counter()
            for i in range(n):
                numpy.copyto(dst[i], ring[(i % per) * page:(i % per + 1) * page])
            if r > 0:
                copy_s.append(time.perf_counter() - t0)
        del regs
        for m, st in stores.items():
            st.close()
            shutil.rmtree(os.path.join(d, f"staging-{m}"), ignore_errors=True)
        w = [x / y for x, y in zip(res["on"][0], res["off"][0])]
        rd = [x / y for x, y in zip(res["on"][1], res["off"][1])]
        # What isolate=off's reads would run at with that copy added after them, in series:
        # staging cannot cost less than that unless the copy overlaps the reads.
        floor = [1 / (1 + c * y / (n * page / 1e9)) for c, y in zip(copy_s, res["off"][1])]
        print(f"| {d} | {fs} | "
              f"{statistics.median(res['on'][0]):.2f}/{statistics.median(res['off'][0]):.2f} GB/s "
              f"= {statistics.median(w):.2f}x | "
              f"{statistics.median(res['on'][1]):.2f}/{statistics.median(res['off'][1]):.2f} GB/s "
              f"= {statistics.median(rd):.2f}x | {statistics.median(floor):.2f}x "
              f"(copy {n * page / statistics.median(copy_s) / 1e9:.1f} GB/s) |")
    for m in mounts:
        m.close()


def cross_host(args):
    """Reads through one mount of pages written through another mount of the same filesystem
    (two ceph-fuse clients: the reader's cache is cold), isolate=on against off."""
    writer_dir, reader_dir = args.cross.split(",")
    page = args.page_kib << 10
    n = (args.mib << 20) // page
    pool = numpy.random.default_rng(3).integers(0, 255, 2 * n * page, dtype=numpy.uint8)
    src = [pool[i * page:(i + 1) * page] for i in range(n)]
    dst = [pool[(n + i) * page:(n + i + 1) * page] for i in range(n)]
    # One writer and one reader per mode, open for the whole run (a serving engine keeps its
    # store: staging is allocated once); fresh keys every round, so the reader's cache is cold.
    res = {"on": [], "off": []}
    name = f"cross-{os.getpid()}"
    w = open_store(f"file://{os.path.join(writer_dir, name)}", page)
    readers = {m: open_store(f"file://{os.path.join(reader_dir, name)}?isolate={m}", page)
               for m in ("on", "off")}
    regs = [w.register_memory(pool)] + [rd.register_memory(pool) for rd in readers.values()]
    for r in range(args.rounds + 1):  # round 0 warms up and is not counted
        for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
            keys = keys_for(f"{name}-{r}-{mode}", n)
            for c in range(0, n, args.batch):
                assert w.batch_put(keys[c:c + args.batch], src[c:c + args.batch]).all_ok
            t0 = time.perf_counter()
            for c in range(0, n, args.batch):
                assert readers[mode].batch_get(keys[c:c + args.batch],
                                               dst[c:c + args.batch]).all_ok
            if r > 0:
                res[mode].append(n * page / (time.perf_counter() - t0) / 1e9)
            w.clear()  # the next round's pages fit wherever this one's did
    del regs
    w.clear()
    for x in [w, *readers.values()]:
        x.close()
    shutil.rmtree(os.path.join(writer_dir, name), ignore_errors=True)
    ratio = [a / b for a, b in zip(res["on"], res["off"])]
    print(f"\n## Cold reads across mounts ({writer_dir} wrote, {reader_dir} read), {n} pages of "
          f"{args.page_kib} KiB, {args.rounds} rounds: isolate=on "
          f"{statistics.median(res['on']):.3f} GB/s, off {statistics.median(res['off']):.3f} GB/s, "
          f"ratio {statistics.median(ratio):.2f}x (per round: "
          f"{', '.join(f'{x:.2f}' for x in ratio)})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--batches", type=int, default=8, help="batches per state and round")
    p.add_argument("--page-kib", type=int, default=128)
    p.add_argument("--deadline-ms", type=int, default=500)
    p.add_argument("--probe-ms", type=int, default=100)
    p.add_argument("--mib", type=int, default=512, help="staging: MiB written and read per round")
    p.add_argument("--staging-dirs", default=tempfile.gettempdir() + ",fuse",
                   help="directories to compare isolate=on/off on; 'fuse': a pass-through "
                        "FUSE mount (kvtier_hangfs) of the temporary directory")
    p.add_argument("--skip-hung", action="store_true")
    p.add_argument("--cross", default="",
                   help="WRITER_DIR,READER_DIR: two mounts of one shared filesystem; cold reads "
                        "through the second of pages written through the first, on against off")
    args = p.parse_args()
    print(f"kvtier {kvtier.__version__}; {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}")
    if not args.skip_hung:
        hung_root(args)
    staging(args)
    if args.cross:
        cross_host(args)


if __name__ == "__main__":
    sys.exit(main())
