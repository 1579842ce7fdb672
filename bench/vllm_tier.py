#!/usr/bin/env python3
"""kvtier.vllm_tier.KvtierTier driven as vLLM's tiering manager drives it, against `kvtier
bench` on the same location, row size and layout, in one run, the two taking turns (order
alternating round by round).

For each --row-kib (a chunk row: every worker's pages of one chunk), each round stores --mib
MiB of fresh chunks through submit_store (jobs of --keys keys, at most --in-flight jobs in
flight, each resubmitted as get_finished_jobs reports it, as a scheduler step would see it),
then looks every chunk up and loads them all back through submit_load into other rows, and
checks every byte; `kvtier bench --page-bytes ROW --batch KEYS --in-flight N --pool-pages P`
moves the same number of pages through a host pool of as many rows. Reported: GB/s of each side (medians) and their ratio, and the time of every
scheduler-thread call the tier served meanwhile (lookup, submit_store, submit_load,
get_finished_jobs, on_schedule_end): p50, p99 and max. vLLM's types come from the test
stand-ins (python/tests/vllm_fakes) when vLLM is not installed.

  PYTHONPATH=build/python /usr/bin/python3 bench/vllm_tier.py [--dir DIR] [--rounds 3]
      [--row-kib 256,2048,8192] [--mib 256] [--keys 32] [--in-flight 4] [--layout auto]
      [--direct-io auto] [--rows-memory shared|private|huge]

Where the rows live matters on its own: vLLM's CPU tier is a shared mapping in 4 KiB pages,
and a copy out of such memory (what a write through the page cache does) is much slower
than out of private memory on some machines, and direct I/O moves memory in huge pages
much faster than in 4 KiB pages; --rows-memory private measures the tier over the kind of
memory kvtier bench uses (private, 4 KiB pages), to see the tier's own cost. A floor for each
kind of memory (one thread's pwrite and preadv of the same rows) is printed beside.
"""

import argparse
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import vllm.v1.kv_offload.base  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "python", "tests", "vllm_fakes"))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

from vllm.v1.kv_offload import base as vbase  # noqa: E402
from vllm.v1.kv_offload.tiering import base as tbase  # noqa: E402

from kvtier import vllm_tier  # noqa: E402
from test_vllm_tier import make_spec  # noqa: E402


class Timed:
    """The tier's scheduler-thread calls, each timed."""

    def __init__(self, tier):
        self.tier = tier
        self.times = {}

    def __getattr__(self, name):
        fn = getattr(self.tier, name)

        def call(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.times.setdefault(name, []).append(time.perf_counter() - t0)
        return call


def run_jobs(timed, jobs, load, in_flight):
    """Submits `jobs` [(keys, rows)], at most `in_flight` at once; returns the seconds from the
    first submission to the last result, and whether every job succeeded."""
    pending = list(enumerate(jobs))
    active = {}
    ok = True
    t0 = time.perf_counter()
    next_id = [0]
    while pending or active:
        while pending and len(active) < in_flight:
            _, (keys, rows) = pending.pop(0)
            job = tbase.TransferJob(job_id=next_id[0], keys=keys,
                                    chunk_ids=numpy.array(rows, dtype=numpy.int32),
                                    is_promotion=load, req_context=vbase.ReqContext("bench"))
            next_id[0] += 1
            active[job.job_id] = job
            (timed.submit_load if load else timed.submit_store)(job)
        # A scheduler step: it waits for nothing; this loop waits for the oldest job so as not
        # to spin, then polls as the manager does.
        oldest = min(active)
        inner = timed.tier._jobs.get(oldest)
        if inner is not None and inner.ticket is not None:
            inner.ticket.wait()
        timed.on_schedule_end(vbase.ScheduleEndContext((), ()))
        for result in timed.get_finished_jobs():
            active.pop(result.job_id)
            ok = ok and result.success
    return time.perf_counter() - t0, ok


def tier_round(root, row, n, keys_per_job, in_flight, layout, direct_io, round_no, times,
               rows_memory="shared"):
    rows = max(2 * n, 2)
    # "shared": vLLM's CPU tier, a shared mapping (/dev/shm), page-aligned, in 4 KiB pages.
    # "private": private memory, as kvtier bench's own pool (transparent huge pages where the
    # kernel gives them): the tier's own cost apart from that of vLLM's memory.
    array = rows_of(rows_memory, rows, row)
    array.fill(1)  # touched, as a serving engine's CPU tier is (kvtier bench warms its pool)
    rng = numpy.random.default_rng(round_no)
    array[:n] = rng.integers(-128, 127, (n, row), dtype=numpy.int8)
    tier = vllm_tier.KvtierTier(make_spec(), memoryview(array), "KvtierTier", root=root,
                                layout=layout, direct_io=direct_io)
    timed = Timed(tier)
    try:
        keys = [vbase.make_offload_key(f"r{round_no}-{i}".encode().ljust(32, b"\0"), 0)
                for i in range(n)]
        jobs = [(keys[i:i + keys_per_job], list(range(i, min(i + keys_per_job, n))))
                for i in range(0, n, keys_per_job)]
        wrote, ok_w = run_jobs(timed, jobs, False, in_flight)
        for k in keys:
            assert timed.lookup(k, vbase.ReqContext("bench")) is vbase.LookupResult.HIT
        back = [(keys[i:i + keys_per_job], list(range(n + i, n + min(i + keys_per_job, n))))
                for i in range(0, n, keys_per_job)]
        read, ok_r = run_jobs(timed, back, True, in_flight)
        assert ok_w and ok_r
        assert numpy.array_equal(array[:n], array[n:2 * n])
        layout_chosen = tier.counters()["store"]["layout"]
    finally:
        tier.shutdown()
    for name, values in timed.times.items():
        times.setdefault(name, []).extend(values)
    return n * row / wrote / 1e9, n * row / read / 1e9, layout_chosen


MEMORY = ("shared", "private", "huge")


def rows_of(kind, rows, row):
    """Page-aligned rows: "shared", a shared mapping (vLLM's CPU tier: /dev/shm, 4 KiB
    pages); "private", private memory in 4 KiB pages (kvtier bench's pool: posix_memalign);
    "huge", private memory with transparent huge pages asked for (numpy's large arrays)."""
    if kind == "shared":
        region = mmap.mmap(-1, rows * row)
    else:
        region = mmap.mmap(-1, rows * row, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE if kind == "huge" else mmap.MADV_NOHUGEPAGE)
    return numpy.frombuffer(region, dtype=numpy.int8).reshape(rows, row)


def floor_round(directory, row, n, direct_io):
    """The machine's own floor for each kind of row memory: one thread writes n rows to a file
    with os.pwrite and reads them back with os.preadv (through the page cache; with O_DIRECT
    when direct_io is not off), GB/s for each of MEMORY."""
    os.makedirs(directory, exist_ok=True)
    out = {}
    for kind in MEMORY:
        array = rows_of(kind, n, row)
        array.fill(5)
        view = memoryview(array).cast("B")
        path = os.path.join(directory, f"floor-{kind}")
        flags = os.O_RDWR | os.O_CREAT | (os.O_DIRECT if direct_io != "off" else 0)
        fd = os.open(path, flags, 0o600)
        try:
            t0 = time.perf_counter()
            for i in range(n):
                os.pwrite(fd, view[i * row:(i + 1) * row], i * row)
            wrote = time.perf_counter() - t0
            t0 = time.perf_counter()
            for i in range(n):
                os.preadv(fd, [view[i * row:(i + 1) * row]], i * row)
            read = time.perf_counter() - t0
        finally:
            os.close(fd)
            os.unlink(path)
        out[kind] = (n * row / wrote / 1e9, n * row / read / 1e9)
    return out


def bench_round(kvtier_bin, directory, row, n, keys_per_job, in_flight, layout, direct_io):
    out = subprocess.run(
        [kvtier_bin, "bench", "--dir", directory, "--page-bytes", str(row), "--pages", str(n),
         "--batch", str(keys_per_job), "--in-flight", str(in_flight), "--direct-io", direct_io,
         # A host pool of as many rows as the tier moves (the default reuses one batch's).
         "--pool-pages", str((n + in_flight - 1) // in_flight), "--json", "--quiet"] +
        (["--layout", layout] if layout != "auto" else []),
        check=True, capture_output=True, text=True).stdout
    d = json.loads(out)
    return d["write_gbps"], d["read_gbps"], d.get("layout_choice", d.get("layout"))


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--row-kib", default="256,2048,8192")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--keys", type=int, default=32, help="keys per job")
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--layout", default="auto", choices=("auto", "files", "segments"))
    ap.add_argument("--direct-io", default="auto", choices=("auto", "on", "off"))
    ap.add_argument("--rows-memory", default="shared", choices=MEMORY,
                    help="the tier's rows: a shared mapping as vLLM's CPU tier (default), "
                         "private memory in 4 KiB pages as kvtier bench's pool, or private "
                         "memory in huge pages")
    ap.add_argument("--kvtier", default=os.path.join(HERE, "..", "build", "bin", "kvtier"))
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="kvtier-vllm-bench-")
    os.makedirs(base, exist_ok=True)
    times = {}
    table, floors = [], []
    for kib in [int(x) for x in args.row_kib.split(",")]:
        row = kib << 10
        n = max(args.keys, (args.mib << 20) // row)
        res = {"tier": ([], []), "bench": ([], [])}
        floor = {kind: ([], []) for kind in MEMORY}
        chosen = ""
        for r in range(args.rounds):
            for side in (("tier", "bench") if r % 2 == 0 else ("bench", "tier")):
                d = os.path.join(base, f"{side}-{kib}-{r}")
                if side == "tier":
                    w, rd, chosen = tier_round(d, row, n, args.keys, args.in_flight,
                                               args.layout, args.direct_io, r, times,
                                               args.rows_memory)
                else:
                    w, rd, _ = bench_round(args.kvtier, d, row, n, args.keys, args.in_flight,
                                           args.layout, args.direct_io)
                res[side][0].append(w)
                res[side][1].append(rd)
                shutil.rmtree(d, ignore_errors=True)
            d = os.path.join(base, f"floor-{kib}-{r}")
            for kind, (w, rd) in floor_round(d, row, n, args.direct_io).items():
                floor[kind][0].append(w)
                floor[kind][1].append(rd)
            shutil.rmtree(d, ignore_errors=True)
        tw, tr = statistics.median(res["tier"][0]), statistics.median(res["tier"][1])
        bw, br = statistics.median(res["bench"][0]), statistics.median(res["bench"][1])
        table.append(f"| {kib} KiB | {chosen.split(' ')[0]} | {tw:.2f} / {bw:.2f} | "
                     f"{tw / bw:.2f}x | {tr:.2f} / {br:.2f} | {tr / br:.2f}x |")
        med = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in floor.items()}
        floors.append(f"| {kib} KiB | " + " | ".join(
            f"{med[k][0]:.2f} / {med[k][1]:.2f}" for k in MEMORY) + " |")
    print(f"rows: {args.rows_memory} memory; direct I/O: {args.direct_io}\n")
    print("| row | layout | tier write / bench write GB/s | ratio | tier read / bench read "
          "GB/s | ratio |")
    print("|---|---|---|---|---|---|")
    print("\n".join(table))
    print("\nfloor, one thread's pwrite / preadv of the same rows (GB/s), by the memory they "
          "are in:\n")
    print("| row | " + " | ".join(f"{k}: write / read" for k in MEMORY) + " |")
    print("|---|" + "---|" * len(MEMORY))
    print("\n".join(floors))
    print("\n| scheduler call | calls | p50 us | p99 us | max us |")
    print("|---|---|---|---|---|")
    for name in ("lookup", "submit_store", "submit_load", "get_finished_jobs",
                 "on_schedule_end"):
        v = times.get(name, [])
        if v:
            print(f"| {name} | {len(v)} | {pct(v, 0.5) * 1e6:.0f} | {pct(v, 0.99) * 1e6:.0f} | "
                  f"{max(v) * 1e6:.0f} |")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
