#!/usr/bin/env python3
"""The two FILE layouts written and read side by side, many rounds: for pages whose writes
this VM's writeback throttles at random (4 MiB and up, 512 MiB a round), where a sweep's 3-5
rounds cannot tell the layouts apart.

Each round runs `kvtier bench` (512 MiB of pages, batches of 128) with --layout segments and
with --layout files, in an order that alternates by round, each measured run after the same
unmeasured segment write (what memory did just before decides a write's speed here). Prints
per layout the median write and read GB/s, how many writes were throttled (under 3 GB/s),
the median of the others, and the ratio of the write medians.

  bench/layouts_ab.py [--dir DIR] [--sizes 4M,8M] [--rounds 16] [--segment-lanes N]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVTIER = os.path.join(ROOT, "build", "bin", "kvtier")
TOTAL = 512 << 20
THROTTLED_GBPS = 3.0
UNITS = {"K": 1 << 10, "M": 1 << 20}


def bench(directory, page, layout_args, kvtier=KVTIER, total=TOTAL, batch=128):
    """(write GB/s, read GB/s) of one `kvtier bench` run of `total` bytes of pages, in
    `directory` (or at a URI: s3://..., file://...)."""
    where = ["--uri" if "://" in directory else "--dir", directory]
    cmd = [kvtier, "bench", *where, "--page-bytes", str(page), "--pages",
           str(max(1, total // page)), "--batch", str(batch), "--json", "--quiet"] + layout_args
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}")
    j = json.loads(proc.stdout)
    if not j["verified"]:
        sys.exit(f"kvtier bench did not verify: {j}")
    return j["write_gbps"], j["read_gbps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/kvtier-layouts-ab")
    ap.add_argument("--sizes", default="4M,8M")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--segment-lanes", type=int, default=0, help="0: the store's default")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    layouts = {"segments": ["--layout", "segments", "--segment-lanes", str(args.segment_lanes)],
               "files": ["--layout", "files"]}
    print("| page | layout | write GB/s (median) | throttled | unthrottled median | "
          "read GB/s (median) | segments / files, write medians |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        page = int(size[:-1]) * UNITS[size[-1]] if size[-1] in UNITS else int(size)
        got = {name: [] for name in layouts}
        for r in range(args.rounds):
            for name in (list(layouts) if r % 2 == 0 else list(layouts)[::-1]):
                bench(args.dir, page, ["--layout", "segments"])  # unmeasured, the same each time
                got[name].append(bench(args.dir, page, layouts[name]))
            print(f"  {page >> 10} KiB round {r + 1}: " + "  ".join(
                f"{n} w {got[n][-1][0]:.2f} r {got[n][-1][1]:.2f}" for n in layouts),
                file=sys.stderr)
        med = {n: statistics.median(w for w, _ in v) for n, v in got.items()}
        for n, v in got.items():
            writes = [w for w, _ in v]
            free = [w for w in writes if w >= THROTTLED_GBPS]
            print(f"| {page >> 10} KiB | {n} | {med[n]:.2f} | "
                  f"{len(writes) - len(free)} of {len(writes)} | "
                  f"{statistics.median(free) if free else float('nan'):.2f} | "
                  f"{statistics.median(r for _, r in v):.2f} | "
                  f"{med['segments'] / med['files']:.2f} |")


if __name__ == "__main__":
    main()
