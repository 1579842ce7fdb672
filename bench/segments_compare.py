#!/usr/bin/env python3
"""The segment layout against fio on one big file, and against the file-per-page layout.

For each page size (512 MiB of pages each, --reps rounds after --warmup discarded ones):
  kvtier bench --layout segments (1 thread, batches of 128)  -> buffered write, hot read
  fio psync, 1 job, one big file of the same size, --bs = the page   -> write, hot read
  kvtier bench --layout files (same pages)                    -> buffered write, hot read
and for 64 KiB and 256 KiB pages the same with direct I/O (kvtier --direct-io on against
fio --direct=1 on one big file). Beside the hot reads, what verification costs: the same
segment bench with --skip-payload-checksum, and the machine's own cost of a chunk hash of every
byte right after its pread, without kvtier (kvtier_verify_floor, 1 thread, chunks of the
page size); the verified read is then also given against fio less that cost (the floor a
checked read can reach). Each pair runs back to back, in alternating order by round;
a ratio is the median (min-max) of the rounds' ratios, GB/s medians (min-max). Every
measured buffered write follows the same unmeasured buffered write of the same volume (on
this VM a write's speed depends on what memory did just before). Then once: the space the
segment layout takes for 70,272-byte pages against their payload.

  bench/segments_compare.py [--dir DIR] [--reps 3] [--warmup 1] [--sizes 64K,256K,1M,4M,8M]
                            [--json-out FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVTIER = os.path.join(ROOT, "build", "bin", "kvtier")
FLOOR = os.path.join(ROOT, "build", "bin", "kvtier_verify_floor")
TOTAL = 512 << 20
BATCH = 128
UNITS = {"K": 1 << 10, "M": 1 << 20}


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}")
    return proc.stdout


def kvtier(directory, layout, page, direct=False, keep=False, verify=True):
    cmd = [KVTIER, "bench", "--dir", directory, "--layout", layout, "--page-bytes", str(page),
           "--pages", str(TOTAL // page), "--batch", str(BATCH), "--json", "--quiet"]
    if direct:
        cmd += ["--direct-io", "on"]
    if not verify:
        cmd += ["--skip-payload-checksum"]
    if keep:
        cmd += ["--keep"]
    j = json.loads(run(cmd))
    if not j["verified"]:
        sys.exit(f"kvtier bench did not verify: {j}")
    return j


def fio(directory, rw, page, direct=False):
    """fio psync, one job, on one big file: GB/s."""
    path = os.path.join(directory, "fio.big")
    cmd = ["fio", "--name=big", f"--filename={path}", f"--size={TOTAL}", f"--bs={page}",
           f"--rw={rw}", "--ioengine=psync", "--numjobs=1", f"--direct={1 if direct else 0}",
           "--invalidate=0", "--fallocate=none", "--output-format=json"]
    out = run(cmd)
    j = json.loads(out[out.index("{"):])
    side = j["jobs"][0]["read" if rw == "read" else "write"]
    return side["bw_bytes"] / 1e9


def crc_floor(directory, page):
    """The cost of the store's chunk hash (CRC-64 or XXH3) of each chunk of `page` bytes right
    after its pread (no kvtier)."""
    chunk_kib = page >> 10
    if page % 4096 or (8 << 20) % page:
        return None
    j = json.loads(run([FLOOR, "--dir", directory, "--threads", "1", "--files", "64",
                        "--pool-mib", "512", "--reps", "3", "--chunk-kib", str(chunk_kib)]))
    return j["hash_cost"]


def condition(directory, page):
    """An unmeasured buffered write and delete of the same volume."""
    kvtier(directory, "segments", page)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fmt(s, digits=2):
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/kvtier-segments-bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--sizes", default="64K,256K,1M,4M,8M")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if not shutil.which("fio"):
        sys.exit("fio is needed: sudo apt-get install fio")
    sizes = [int(s[:-1]) * UNITS[s[-1]] if s[-1] in UNITS else int(s)
             for s in args.sizes.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    results = {}
    for page in sizes:
        r = {k: [] for k in ("seg_w", "seg_r", "fio_w", "fio_r", "files_w", "files_r",
                             "w_ratio", "r_ratio", "files_w_ratio", "files_r_ratio",
                             "seg_dw", "seg_dr", "fio_dw", "fio_dr", "dw_ratio", "dr_ratio",
                             "seg_r_nv", "nv_ratio", "check_cost", "floor_cost",
                             "floor_ratio")}
        direct = page <= (256 << 10)
        for rnd in range(args.warmup + args.reps):
            measured = rnd >= args.warmup

            def seg():
                condition(args.dir, page)
                return kvtier(args.dir, "segments", page)

            def big():
                condition(args.dir, page)
                w = fio(args.dir, "write", page)
                rd = fio(args.dir, "read", page)
                os.remove(os.path.join(args.dir, "fio.big"))
                return w, rd

            if rnd % 2 == 0:
                s = seg()
                fw, fr = big()
            else:
                fw, fr = big()
                s = seg()
            nv = kvtier(args.dir, "segments", page, verify=False)
            cost = crc_floor(args.dir, page)
            condition(args.dir, page)
            f = kvtier(args.dir, "files", page)
            sd = fdw = fdr = None
            if direct:
                def dseg():
                    return kvtier(args.dir, "segments", page, direct=True)

                def dbig():
                    w = fio(args.dir, "write", page, direct=True)
                    rd = fio(args.dir, "read", page, direct=True)
                    os.remove(os.path.join(args.dir, "fio.big"))
                    return w, rd

                if rnd % 2 == 0:
                    sd = dseg()
                    fdw, fdr = dbig()
                else:
                    fdw, fdr = dbig()
                    sd = dseg()
            if not measured:
                continue
            r["seg_w"].append(s["write_gbps"])
            r["seg_r"].append(s["read_gbps"])
            r["fio_w"].append(fw)
            r["fio_r"].append(fr)
            r["files_w"].append(f["write_gbps"])
            r["files_r"].append(f["read_gbps"])
            r["w_ratio"].append(s["write_gbps"] / fw)
            r["r_ratio"].append(s["read_gbps"] / fr)
            r["files_w_ratio"].append(s["write_gbps"] / f["write_gbps"])
            r["files_r_ratio"].append(s["read_gbps"] / f["read_gbps"])
            r["seg_r_nv"].append(nv["read_gbps"])
            r["nv_ratio"].append(nv["read_gbps"] / fr)
            r["check_cost"].append(1 - s["read_gbps"] / nv["read_gbps"])
            if cost is not None:
                r["floor_cost"].append(cost)
                r["floor_ratio"].append(s["read_gbps"] / (fr * (1 - cost)))
            if direct:
                r["seg_dw"].append(sd["write_gbps"])
                r["seg_dr"].append(sd["read_gbps"])
                r["fio_dw"].append(fdw)
                r["fio_dr"].append(fdr)
                r["dw_ratio"].append(sd["write_gbps"] / fdw)
                r["dr_ratio"].append(sd["read_gbps"] / fdr)
            print(f"  {page >> 10} KiB round {rnd - args.warmup + 1}: seg w {s['write_gbps']:.2f} "
                  f"r {s['read_gbps']:.2f} (unverified {nv['read_gbps']:.2f}) | fio w {fw:.2f} "
                  f"r {fr:.2f}" + (f" (bare hash cost {cost:.3f})" if cost is not None else "") +
                  " | files w "
                  f"{f['write_gbps']:.2f} r {f['read_gbps']:.2f}" +
                  (f" | direct seg w {sd['write_gbps']:.2f} r {sd['read_gbps']:.2f} fio w "
                   f"{fdw:.2f} r {fdr:.2f}" if direct else ""), file=sys.stderr)
        results[page] = {k: summary(v) for k, v in r.items() if v}

    # Space: 70,272-byte pages (a DeepSeek-V3 page of one token).
    j = kvtier(args.dir, "segments", 70272, keep=True)
    st = json.loads(run([KVTIER, "stat", args.dir, "--json"]))
    # The bench's namespace for this page size (the directory holds the other sizes' too).
    ns = next(n for n in st["namespaces"]
              if (n["manifest"] or {}).get("model") == "kvtier-bench:70272B")
    seg_bytes = ns["segment_bytes"]
    pages = TOTAL // 70272
    if ns["pages"] != pages:
        sys.exit(f"space: the namespace holds {ns['pages']} pages, not the {pages} just written "
                 f"(a previous run's? clear {args.dir})")
    space = seg_bytes / (pages * 70272)
    run([KVTIER, "clear", args.dir, "--namespace", ns["id"], "--quiet"])

    print("| page | segments write | fio write, one big file | ratio | segments hot read | "
          "fio read, one big file | ratio | files write | files read | segments/files write | "
          "segments/files read |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for page, s in results.items():
        print(f"| {page >> 10} KiB | {fmt(s['seg_w'])} | {fmt(s['fio_w'])} | {fmt(s['w_ratio'])} | "
              f"{fmt(s['seg_r'])} | {fmt(s['fio_r'])} | {fmt(s['r_ratio'])} | {fmt(s['files_w'])} | "
              f"{fmt(s['files_r'])} | {fmt(s['files_w_ratio'])} | {fmt(s['files_r_ratio'])} |")
    print()
    print("| page | segments hot read | unverified | fio read, one big file | verified / fio | "
          "unverified / fio | what kvtier's check costs | a bare hash after pread costs | "
          "verified / (fio less that) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for page, s in results.items():
        floor = (f"{fmt(s['floor_cost'], 3)} | {fmt(s['floor_ratio'])}" if "floor_cost" in s
                 else "| ")
        print(f"| {page >> 10} KiB | {fmt(s['seg_r'])} | {fmt(s['seg_r_nv'])} | {fmt(s['fio_r'])} | "
              f"{fmt(s['r_ratio'])} | {fmt(s['nv_ratio'])} | {fmt(s['check_cost'], 3)} | {floor} |")
    print()
    print("| page | segments direct write | fio --direct=1 write | ratio | segments direct read | "
          "fio --direct=1 read | ratio |")
    print("|---|---|---|---|---|---|---|")
    for page, s in results.items():
        if "seg_dw" in s:
            print(f"| {page >> 10} KiB | {fmt(s['seg_dw'])} | {fmt(s['fio_dw'])} | "
                  f"{fmt(s['dw_ratio'])} | {fmt(s['seg_dr'])} | {fmt(s['fio_dr'])} | "
                  f"{fmt(s['dr_ratio'])} |")
    print()
    print(f"space: {pages} pages of 70,272 bytes take {seg_bytes} bytes in segments and "
          f"summaries: {space:.4f} x the payload")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"results": {str(k): v for k, v in results.items()}, "space": space,
                       "bench_layout": j["layout"]}, f, indent=1)


if __name__ == "__main__":
    main()
