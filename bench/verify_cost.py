#!/usr/bin/env python3
"""What verifying every byte costs a hot read, per page size, with the machine's floor beside.

For each page size, rounds of `kvtier bench` (the default layout for the size, one client
thread, batches of 128, the store's defaults) read the same pages verified and with
--skip-payload-checksum (headers still checked, every byte still compared afterwards), in an
order that alternates by round; the cost is 1 - verified / unverified, the median over the
rounds (min-max). Beside it, the same check without kvtier: kvtier_verify_floor, whose threads
(as many as the CPUs this process may use) pread hot 8 MiB files in 256 KiB chunks into a pool
with and without a hash of each chunk right after its read (the one kvtier's stores write on
this CPU: CRC-64 or XXH3-64, docs/format.md), in alternate rounds: what hashing every byte
costs this machine by itself. kvtier checks each 256 KiB chunk on the
thread that completed its read, as it lands (docs/architecture.md, "Every core a batch is
given"): the floor is what that can cost at best.

  bench/verify_cost.py [--dir DIR] [--sizes 64K,256K,4M,8M] [--rounds 6] [--mib 512]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from compare import FLOOR, KVTIER, run

UNITS = {"K": 1 << 10, "M": 1 << 20}


def page_bytes(text):
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def read_gbps(directory, page, pages, checked):
    cmd = [KVTIER, "bench", "--dir", directory, "--page-bytes", str(page), "--pages", str(pages),
           "--batch", "128", "--pool-pages", "128", "--json", "--quiet"]
    if not checked:
        cmd.append("--skip-payload-checksum")
    j = json.loads(run(cmd))
    if not j["verified"]:
        sys.exit(f"kvtier bench did not verify: {j}")
    return j["read_gbps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "kvtier-verify"))
    ap.add_argument("--sizes", default="64K,256K,4M,8M")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--mib", type=int, default=512)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    threads = len(os.sched_getaffinity(0))
    floor_dir = os.path.join(args.dir, "floor")
    os.makedirs(floor_dir, exist_ok=True)
    floor = json.loads(run([FLOOR, "--dir", floor_dir, "--threads", str(threads), "--files",
                            str(max(1, (args.mib >> 3) // threads)), "--pool-mib",
                            str(max(64, args.mib // threads)), "--reps", "5"]))
    print(f"floor (kvtier_verify_floor, {threads} threads): pread {floor['read_gbps']:.2f} GB/s, "
          f"pread + {floor['hash']} {floor['read_hashed_gbps']:.2f} GB/s, "
          f"cost {100 * floor['hash_cost']:.1f}%")
    print("| page | verified GB/s | unverified GB/s | verification cost | floor |")
    print("|---|---|---|---|---|")
    for size in args.sizes.split(","):
        page = page_bytes(size)
        pages = max(128, (args.mib << 20) // page)
        checked, unchecked = [], []
        for r in range(args.rounds):
            for c in ([True, False] if r % 2 == 0 else [False, True]):
                (checked if c else unchecked).append(read_gbps(args.dir, page, pages, c))
        cost = [1 - a / b for a, b in zip(checked, unchecked)]
        print(f"| {size} | {statistics.median(checked):.2f} | {statistics.median(unchecked):.2f} | "
              f"{100 * statistics.median(cost):.1f}% ({100 * min(cost):.1f} to {100 * max(cost):.1f}%)"
              f" | {100 * floor['hash_cost']:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
