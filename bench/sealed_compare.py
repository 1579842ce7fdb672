#!/usr/bin/env python3
"""Sealed pages against pages in the clear, side by side, with the cipher's own limit beside.

For each page size and client thread count, rounds of `kvtier bench` (layouts_ab.py's run:
--json, here batches of 32; the default layout for the size) run in the clear and sealed (--key-file, a throw-away key) in an order
that alternates by round; `openssl speed -evp aes-256-gcm -bytes <page>` (-multi <threads>)
is the cipher's limit on this machine, measured in the same run. Prints per size, thread
count and phase the median GB/s of each, sealed / plain, sealed / the cipher's limit, and
the target that applies: sealed >= 0.85 x the cipher's limit where plain is faster than the
cipher, sealed >= 0.9 x plain where it is slower (docs/benchmarks.md, "Sealed pages"); and
the machine's floor, 1 / (1 / plain + 1 / cipher on every core): what plain's work and the
cipher's pass cost one after the other on all the cores the store uses (`openssl speed
-multi` over the process's usable CPUs, measured in the same round), which is what a sealed
run does where the copy into or out of the page cache and the cipher both need the CPU.
Sealed / floor is the figure to judge where the cipher's limit leaves no core for the copy.

  bench/sealed_compare.py [--dir DIR] [--sizes 64K,256K,4M,8M] [--threads 1,2] [--rounds 5]
      [--mib 256] [--uri URI]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from layouts_ab import bench

UNITS = {"K": 1 << 10, "M": 1 << 20}


def parse_size(text):
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def cipher_gbps(page, threads):
    """AES-256-GCM over buffers of `page` bytes, `threads` processes: openssl speed's GB/s."""
    cmd = ["openssl", "speed", "-seconds", "1", "-evp", "aes-256-gcm", "-bytes", str(page)]
    if threads > 1:
        cmd += ["-multi", str(threads)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         check=True).stdout
    # The last line: "AES-256-GCM  <n>k" (thousands of bytes per second).
    m = re.search(r"aes-256-gcm\s+([\d.]+)k\s*$", out.strip().splitlines()[-1], re.I)
    if not m:
        sys.exit(f"cannot read openssl speed's output:\n{out}")
    return float(m.group(1)) * 1000 / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/kvtier-sealed-compare")
    ap.add_argument("--uri", default="", help="a store URI instead of --dir (S3, CephFS)")
    ap.add_argument("--sizes", default="64K,256K,4M,8M")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256, help="MiB of pages each run writes")
    args = ap.parse_args()
    where = args.uri or args.dir
    cores = len(os.sched_getaffinity(0))  # what the store spreads over (usable_cpus())
    print(f"usable cores: {cores}\n")
    if not args.uri:
        os.makedirs(args.dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as keys_dir:
        key_file = os.path.join(keys_dir, "keys")
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, f"1 {os.urandom(32).hex()}\n".encode())
        os.close(fd)
        variants = {"plain": [], "sealed": ["--key-file", key_file, "--tenant", "bench"]}
        print("| page | threads | phase | plain GB/s | sealed GB/s | sealed / plain | "
              "cipher limit GB/s | sealed / limit | machine floor GB/s | sealed / floor | "
              "target |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for size in args.sizes.split(","):
            page = parse_size(size)
            for threads in (int(t) for t in args.threads.split(",")):
                got = {name: [] for name in variants}
                limits, every_core = [], []
                for r in range(args.rounds):
                    order = list(variants) if r % 2 == 0 else list(variants)[::-1]
                    for name in order:
                        got[name].append(bench(where, page,
                                               ["--threads", str(threads)] + variants[name],
                                               total=args.mib << 20, batch=32))
                    limits.append(cipher_gbps(page, threads))
                    every_core.append(limits[-1] if threads == cores else cipher_gbps(page, cores))
                    print(f"  {size} x{threads} round {r + 1}: " + "  ".join(
                        f"{n} w {got[n][-1][0]:.2f} r {got[n][-1][1]:.2f}" for n in variants) +
                        f"  cipher {limits[-1]:.2f} (every core {every_core[-1]:.2f})",
                        file=sys.stderr)
                limit = statistics.median(limits)
                all_cores = statistics.median(every_core)
                for phase, i in (("write", 0), ("read", 1)):
                    plain = statistics.median(v[i] for v in got["plain"])
                    sealed = statistics.median(v[i] for v in got["sealed"])
                    if plain > limit:
                        target = f"sealed >= 0.85 x limit: {'yes' if sealed >= 0.85 * limit else 'NO'}"
                    else:
                        target = f"sealed >= 0.9 x plain: {'yes' if sealed >= 0.9 * plain else 'NO'}"
                    floor = 1 / (1 / plain + 1 / all_cores)
                    print(f"| {size} | {threads} | {phase} | {plain:.2f} | {sealed:.2f} | "
                          f"{sealed / plain:.2f} | {limit:.2f} | {sealed / limit:.2f} | "
                          f"{floor:.2f} | {sealed / floor:.2f} | {target} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
