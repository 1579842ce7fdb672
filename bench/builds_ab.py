#!/usr/bin/env python3
"""Two builds of `kvtier bench` side by side: a change's binary against the one before it, on the
same machine in one run, taking turns in an order that alternates by round (these VMs drift
by more than most changes move). Each run writes --mib MiB of pages into a store of its own
(deleted after it, as every `kvtier bench` run's is), reads them back and verifies every byte.
Prints per shape and build the median write and read GB/s, and B / A of the medians.

  bench/builds_ab.py --a OLD/build/bin/kvtier --b build/bin/kvtier
      [--shapes 64K:segments,8M:files] [--rounds 8] [--mib 512] [--dir DIR]
      [--sglang llama-ps16:segments,mla-ps16:files] [--key-file FILE [--threads N]]
      [--batch 128]

A shape is PAGE_BYTES:LAYOUT (K and M suffixes). --key-file runs both builds' benches sealed
under FILE's keys (docs/security.md); --threads sets their client threads. Build the other revision in a directory of
its own (git worktree add /tmp/old REV; cmake --preset release there, and build its
kvtier_python_package for --sglang).

--sglang SHAPE:LAYOUT,... measures the same two builds through SGLang's own calls: each round
runs bench/sglang_vs_bench.py (--reps 1: one warm-up round, one counted) once per build, in
alternating order, with the build's Python package (<build>/python beside <build>/bin) and
its kvtier; the table gives the adapter's medians. SHAPE is one of sglang_vs_bench.py's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from layouts_ab import UNITS, bench  # one `kvtier bench` run: (write GB/s, read GB/s)


def page_bytes(text):
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the baseline build's kvtier binary")
    ap.add_argument("--b", required=True, help="the build measured against it")
    ap.add_argument("--shapes", default="64K:segments,8M:files")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--dir", default="/var/tmp/kvtier-builds-ab")
    ap.add_argument("--sglang", default="", help="SHAPE:LAYOUT,... through SGLang's calls")
    ap.add_argument("--key-file", default="", help="seal every run's pages under FILE's keys")
    ap.add_argument("--threads", type=int, default=1, help="kvtier bench's client threads")
    ap.add_argument("--batch", type=int, default=128,
                    help="kvtier bench's pages per batch (a client thread takes a batch at a "
                    "time: with several threads, --mib must hold a batch for each)")
    args = ap.parse_args()
    extra = ["--threads", str(args.threads)]
    if args.key_file:
        extra += ["--key-file", os.path.abspath(args.key_file)]
    builds = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    for name, path in builds.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"--{name.lower()} {path}: not an executable")
    print(f"A = {builds['A']}\nB = {builds['B']}\n")
    print("| page | layout | A write | B write | B/A write | A read | B read | B/A read |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in filter(None, args.shapes.split(",")):
        size, _, layout = shape.partition(":")
        page = page_bytes(size)
        compare(builds, args.rounds, f"{size} | {layout}",
                lambda kvtier, name: bench(os.path.join(args.dir, name), page,
                                           ["--layout", layout or "auto"] + extra, kvtier=kvtier,
                                           total=args.mib << 20, batch=args.batch))
    for shape in filter(None, args.sglang.split(",")):
        name, _, layout = shape.partition(":")
        compare(builds, args.rounds, f"SGLang {name} | {layout}",
                lambda kvtier, _: through_sglang(kvtier, name, layout or "files", args))


def compare(builds, rounds, label, run):
    """`rounds` rounds of run(kvtier, build name) -> (write GB/s, read GB/s) on each build, A
    first in even rounds and B first in odd ones; prints the row of medians and B / A."""
    got = {n: [] for n in builds}
    for r in range(rounds):
        for n in (["A", "B"] if r % 2 == 0 else ["B", "A"]):
            got[n].append(run(builds[n], n))
        print(f"  {label} round {r + 1}: " + "  ".join(
            f"{n} w {got[n][-1][0]:.2f} r {got[n][-1][1]:.2f}" for n in builds), file=sys.stderr)
    w = {n: statistics.median(x for x, _ in v) for n, v in got.items()}
    rd = {n: statistics.median(y for _, y in v) for n, v in got.items()}
    print(f"| {label} | {w['A']:.2f} | {w['B']:.2f} | {w['B'] / w['A']:.2f} | "
          f"{rd['A']:.2f} | {rd['B']:.2f} | {rd['B'] / rd['A']:.2f} |")


def through_sglang(kvtier, shape, layout, args):
    """One sglang_vs_bench.py run on `kvtier`'s build: the adapter's (write GB/s, read GB/s)."""
    build = os.path.dirname(os.path.dirname(kvtier))
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, os.path.join(here, "sglang_vs_bench.py"), "--shapes", shape,
         "--layouts", layout, "--reps", "1", "--mib", str(args.mib), "--json",
         "--kvtier", kvtier, "--dir", os.path.join(args.dir, "sglang")],
        env=env, check=True, capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])[0]
    return row["write"]["adapter"], row["read"]["adapter"]


if __name__ == "__main__":
    main()
