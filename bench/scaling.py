#!/usr/bin/env python3
"""kvtier against fio as the cores grow: 1, 2, ... N cores, side by side, in one run.

For each page size and each core count C (1 to the CPUs this process may use, or --cores), both
sides run pinned to the same C cores (sched_setaffinity, as `taskset -c 0-<C-1>` would):
  kvtier bench      one client thread (batches: see below), the store as a new
                    user's is (nothing set): it sizes its threads from the cores it may use
                    (usable_cpus(): cpus= and the backend's threads follow the affinity mask);
                    buffered write, then page-cache-hot read, every byte verified
  fio               numjobs=C, psync, bs = the page, the same bytes on the same directory:
                    one file per page where kvtier writes page files (4 MiB and up), one file
                    per job where kvtier packs pages into segment files (smaller pages);
                    buffered write (files created while timed, as kvtier's are), then hot read
                    (--invalidate=0)
back to back, kvtier first in even rounds and fio first in odd ones, each after the same
unmeasured write and delete of the volume (compare.py's condition(): a buffered write's speed on
these VMs depends on what memory did just before). A ratio is the median (min-max) of the
rounds' kvtier/fio ratios; GB/s are medians. kvtier runs twice a round, in two shapes:
  footprint   the same bytes through about the same memory as fio: fio reuses one buffer of
              one page per job (C pages in all), kvtier a host pool of one batch of
              max(C, 8 MiB / page) pages (8 MiB for small pages, so that a call moves more
              than one page; C pages of 8 MiB), each call then moving only a few large pages
  engine      an engine's shape: batches of 128 pages through a pool of one batch (1 GiB of
              8 MiB pages, far beyond the CPU's caches, as a serving engine's host pool is)
A larger fio footprint (io_uring at a deep queue) measures this VM's first touch of fio's
fresh buffers, not storage (docs/benchmarks.md).

Beside them, in the same rotation, the machine's floor for a verified read at kvtier's own
footprint: kvtier_verify_floor, C threads pinned likewise, each pread-ing hot 8 MiB files in
reads of the page (at most 256 KiB, the chunk kvtier hashes) into its share of the footprint
shape's pool, then hashing what it read as kvtier's stores do ("hashed"), in rounds alternating
with the same reads unhashed ("bare"). fio rereads one page-sized buffer per job, which stays in
the core's L1/L2; kvtier and the floor read into a pool of many pages, as an engine does.

  bench/scaling.py [--dir DIR] [--rounds 3] [--mib 1024] [--pages-kib 64,4096,8192]
                   [--cores 1,2] [--json-out FILE]

Needs a Release build (make build) and fio (Debian's `fio`; installed when run as root).
"""

import argparse
import json
import os
import shutil
import sys

from compare import FLOOR, KVTIER, fmt_range, med, need_fio, run

BATCH = 128
FILES_FROM = 4 << 20  # kvtier's layout=auto writes page files from this size, segments below


def pinned(cores):
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    return lambda: os.sched_setaffinity(0, cpus)


def run_pinned(cmd, cores):
    """run(), with the child pinned to the first `cores` usable CPUs."""
    import subprocess
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=pinned(cores))
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}")
    return proc.stdout


def condition(directory, page, pages):
    run([KVTIER, "bench", "--uri", f"{directory}?backend=posix", "--page-bytes", str(page),
         "--pages", str(pages), "--batch", str(BATCH), "--json", "--quiet"])


def footprint_batch(page, cores):
    """The footprint shape's pages a call (and in its pool)."""
    return min(BATCH, max(cores, (8 << 20) // page))


def kvtier(directory, page, pages, cores, engine):
    batch = BATCH if engine else footprint_batch(page, cores)
    out = run_pinned([KVTIER, "bench", "--dir", directory, "--page-bytes", str(page), "--pages",
                      str(pages), "--batch", str(batch), "--json", "--quiet"], cores)
    j = json.loads(out)
    if not j["verified"]:
        sys.exit(f"kvtier bench did not verify: {out}")
    return j["write_gbps"], j["read_gbps"]


def fio(directory, page, pages, cores):
    """fio write then hot read of the same files: (write GB/s, read GB/s)."""
    per_job = max(1, pages // cores)
    if page >= FILES_FROM:
        layout = [f"--nrfiles={per_job}", f"--filesize={page}", "--file_service_type=sequential",
                  "--create_on_open=1", "--openfiles=1"]
    else:
        layout = ["--nrfiles=1", f"--filesize={per_job * page}"]
    base = ["fio", "--name=kv", f"--directory={directory}",
            "--filename_format=fio.$jobnum.$filenum", f"--size={per_job * page}", f"--bs={page}",
            "--ioengine=psync", f"--numjobs={cores}", "--invalidate=0", "--fallocate=none",
            "--group_reporting", "--output-format=json", *layout]
    rates = []
    for rw in ("write", "read"):
        out = run_pinned(base + [f"--rw={rw}"], cores)
        job = json.loads(out[out.index("{"):])["jobs"][0]
        rates.append(job[rw]["bw_bytes"] / 1e9)
    for name in os.listdir(directory):
        if name.startswith("fio."):
            os.unlink(os.path.join(directory, name))
    return tuple(rates)


def floor(directory, page, pages, cores):
    """kvtier_verify_floor at the footprint shape's pool: (bare read GB/s, hashed read GB/s)."""
    pool_mib = max(1, footprint_batch(page, cores) * page // cores >> 20)
    files = max(1, pages * page // (8 << 20) // cores)
    out = run_pinned([FLOOR, "--dir", directory, "--threads", str(cores), "--files", str(files),
                      "--pool-mib", str(pool_mib), "--chunk-kib", str(min(page, 256 << 10) >> 10),
                      "--reps", "2"], cores)
    j = json.loads(out)
    return j["read_gbps"], j["read_hashed_gbps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "kvtier-scaling"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024, help="bytes each side moves per cell")
    ap.add_argument("--pages-kib", default="64,4096,8192")
    ap.add_argument("--cores", default=None,
                    help="core counts (default: 1 to the CPUs this process may use)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    need_fio()
    usable = len(os.sched_getaffinity(0))
    cores = ([int(c) for c in args.cores.split(",")] if args.cores
             else list(range(1, usable + 1)))
    if max(cores) > usable:
        sys.exit(f"--cores {max(cores)}: this process may use {usable} CPUs")
    os.makedirs(args.dir, exist_ok=True)
    results = []
    for kib in [int(k) for k in args.pages_kib.split(",")]:
        page = kib << 10
        pages = max(BATCH, (args.mib << 20) // page)
        for c in cores:
            cell = {"page_bytes": page, "pages": pages, "cores": c, "footprint": [],
                    "engine": [], "fio": [], "floor": []}
            work = os.path.join(args.dir, f"cell-{kib}-{c}")
            for r in range(args.rounds):
                sides = ["footprint", "fio", "floor", "engine"]
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    shutil.rmtree(work, ignore_errors=True)
                    os.makedirs(work)
                    condition(work, page, pages)
                    shutil.rmtree(work, ignore_errors=True)
                    os.makedirs(work)
                    if side == "fio":
                        cell[side].append(fio(work, page, pages, c))
                    elif side == "floor":
                        cell[side].append(floor(work, page, pages, c))
                    else:
                        cell[side].append(kvtier(work, page, pages, c, side == "engine"))
            shutil.rmtree(work, ignore_errors=True)
            results.append(cell)
            fw = [x[0] for x in cell["fio"]]
            fr = [x[1] for x in cell["fio"]]
            bare = [x[0] for x in cell["floor"]]
            hashed = [x[1] for x in cell["floor"]]
            line = (f"{kib:6d} KiB  {c} core{'s' if c > 1 else ' '}  fio write {fmt_range(fw)} "
                    f"read {fmt_range(fr)} | floor read bare {med(bare):.2f} hashed {med(hashed):.2f}")
            for shape in ("footprint", "engine"):
                kw = [x[0] for x in cell[shape]]
                kr = [x[1] for x in cell[shape]]
                rw = [a / b for a, b in zip(kw, fw)]
                rr = [a / b for a, b in zip(kr, fr)]
                cell[shape + "_ratios"] = {"write": med(rw), "read": med(rr)}
                line += (f" | kvtier {shape}: write {med(kw):.2f} = {med(rw):.2f}x "
                         f"({min(rw):.2f}-{max(rw):.2f}), read {med(kr):.2f} = {med(rr):.2f}x "
                         f"({min(rr):.2f}-{max(rr):.2f})")
                if shape == "footprint":  # the floor reads through the same memory
                    rf = [a / b for a, b in zip(kr, hashed)]
                    cell["footprint_ratios"]["read_floor"] = med(rf)
                    line += f" = {med(rf):.2f}x hashed floor ({min(rf):.2f}-{max(rf):.2f})"
            print(line, flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
