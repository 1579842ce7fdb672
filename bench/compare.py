#!/usr/bin/env python3
"""kvtier against fio and memcpy, side by side, in one run.

For each model shape it runs, in rounds (--reps of them, after --warmup discarded ones):
  kvtier bench (buffered)      -> buffered write, page-cache-hot read, with and without
                                  payload verification
  fio, same files-per-page     -> buffered write, page-cache-hot read
     in twin configurations: fio with J jobs at iodepth D against kvtier with J client
     threads issuing batches of D pages (psync x1, psync x2, io_uring x2 qd64, io_uring x1
     qd128), and each side's best configuration against the other's
  kvtier bench --direct-io on  -> direct write, direct read
  fio --direct=1               -> direct write, direct read, in twin configurations of
     kvtier's total queue depth: io_uring x2 qd64 against 2 threads with batches of 64;
     io_uring x1 qd128 against 1 thread with blocking batches of 128, and against 1 thread
     keeping 2 batches of 64 in flight (kvtier bench --in-flight 2)
and once: one core memcpy'ing the same bytes (the read ceiling); then batch_exists(128), and
verification's cost on hot reads of 4 MiB and 1.25 MiB pieces in one process (microbenchmark),
and the same check's cost without kvtier (kvtier_verify_floor: pread, then the chunk hash).

Each kvtier measurement runs back to back with its fio twin, kvtier first in even rounds and
fio first in odd ones. A ratio is the median (min-max) of the rounds' kvtier/fio ratios, so
the VM's drift between rounds cancels out; GB/s are medians (min-max) over the rounds.
Same directory, same page size and count, same batch footprint; CPU seconds per GB too.
Needs a Release build (make build) and fio (Debian's `fio`; installed when run as root).

  bench/compare.py [--dir DIR] [--reps 3] [--pages-scale 1.0] [--shapes llama,qwen,deepseek]
                   [--warmup 1] [--json-out FILE]
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
MEMCPY = os.path.join(ROOT, "build", "bin", "kvtier_memcpy_ceiling")
MICRO = os.path.join(ROOT, "build", "bin", "kvtier_microbench")
FLOOR = os.path.join(ROOT, "build", "bin", "kvtier_verify_floor")

# name: (kvtier flags, page bytes, piece bytes, pages)
SHAPES = {
    "llama": (["--model", "llama3-8b"], 8 << 20, 4 << 20, 256),
    "qwen": (["--model", "qwen2.5-72b-tp8"], 2621440, 1310720, 512),
    "deepseek": (["--page-bytes", "70272"], 70272, 70272, 4096),
}
BATCH = 128


def run(cmd):
    """Runs cmd and returns its stdout; exits with its stderr when it fails."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}")
    return proc.stdout


def timed(cmd):
    """Runs cmd and returns (stdout, CPU seconds it used, its children included)."""
    before = os.times()
    out = run(cmd)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return out, cpu


def need_fio():
    if shutil.which("fio"):
        return
    if os.geteuid() == 0:
        print("installing fio (Debian package)...", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-qq", "fio"], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
                       stdout=subprocess.DEVNULL)
        return
    sys.exit("fio is needed: sudo apt-get install fio")


def kvtier_bench(directory, shape, pages, direct, checksum=True, threads=1, batch=BATCH,
                 in_flight=1):
    flags, _, _, _ = SHAPES[shape]
    cmd = [KVTIER, "bench", "--dir", directory, *flags, "--pages", str(pages), "--batch",
           str(batch), "--threads", str(threads), "--in-flight", str(in_flight), "--json"]
    if direct:
        cmd += ["--direct-io", "on"]
    if not checksum:
        cmd += ["--skip-payload-checksum"]
    out = run(cmd)
    j = json.loads(out)
    if not j["verified"]:
        sys.exit(f"kvtier bench did not verify: {out}")
    return j


def condition(directory, shape, pages):
    """An unmeasured buffered write and delete of the same volume. On a VM, a buffered write's
    speed depends on what memory did just before (pages the host took back are slow to fault
    in again, pages freed a moment ago are quick): every measured buffered write, kvtier's or
    fio's, follows this same step, so neither inherits a better memory state."""
    flags, _, _, _ = SHAPES[shape]
    run([KVTIER, "bench", "--uri", f"{directory}?backend=posix", *flags, "--pages", str(pages),
         "--batch", str(BATCH), "--json"])


def fio_files(directory, shape, pages, jobs, rw, engine, depth, direct):
    """fio over one file per page, like kvtier: returns (GB/s, CPU s/GB)."""
    _, page, piece, _ = SHAPES[shape]
    if direct:
        # O_DIRECT needs aligned sizes: a 70,272-byte page becomes 73,728 (kvtier pads the same
        # page to whole 4 KiB blocks too).
        page = (page + 4095) // 4096 * 4096
        piece = min(piece, page) if piece % 4096 == 0 else page
    per_job = max(1, pages // jobs)
    cmd = ["fio", "--name=kv", f"--directory={directory}",
           "--filename_format=fio.$jobnum.$filenum", f"--nrfiles={per_job}",
           f"--filesize={page}", f"--size={per_job * page}", f"--bs={piece}", f"--rw={rw}",
           f"--ioengine={engine}", f"--iodepth={depth}", f"--numjobs={jobs}",
           f"--openfiles={min(per_job, max(1, depth))}", "--file_service_type=sequential",
           f"--direct={1 if direct else 0}", "--invalidate=0", "--fallocate=none",
           "--create_on_open=1", "--group_reporting", "--output-format=json"]
    out, cpu = timed(cmd)
    j = json.loads(out[out.index("{"):])
    job = j["jobs"][0]
    side = job["read"] if rw == "read" else job["write"]
    gbps = side["bw_bytes"] / 1e9
    moved = side["io_bytes"] / 1e9
    return gbps, (cpu / moved if moved else 0.0)


def remove_fio_files(directory):
    for name in os.listdir(directory):
        if name.startswith("fio."):
            os.unlink(os.path.join(directory, name))


def med(xs):
    return statistics.median(xs) if xs else 0.0


def fmt_range(xs):
    if not xs:
        return "-"
    return f"{med(xs):6.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "kvtier-compare"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pages-scale", type=float, default=1.0,
                    help="scale every shape's page count (0.25 for a quick look)")
    ap.add_argument("--shapes", default="llama,qwen,deepseek")
    ap.add_argument("--warmup", type=int, default=1, help="discarded rounds before measuring")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    for binary in (KVTIER, MEMCPY):
        if not os.path.exists(binary):
            sys.exit(f"{binary} is missing: run `make build` first")
    need_fio()
    os.makedirs(args.dir, exist_ok=True)

    report = {"machine": os.uname().nodename, "kernel": os.uname().release,
              "cpus": os.cpu_count(), "dir": args.dir, "reps": args.reps, "shapes": {}}
    print(f"kvtier vs fio in {args.dir} ({os.cpu_count()} CPUs, kernel {os.uname().release}); "
          f"median (min-max) of {args.reps}, batches of {BATCH}\n")

    for shape in args.shapes.split(","):
        _, page, piece, pages = SHAPES[shape]
        pages = max(BATCH, int(pages * args.pages_scale))
        r = {}

        def add(key, value):
            r.setdefault(key, []).append(value)

        probe = kvtier_bench(args.dir, shape, BATCH, direct=False)
        backend = probe["backend_description"]
        jobs, depth, engine = queue_shape(backend)
        same = f"{engine} x{jobs} qd{depth}"
        configs = [("psync", 1, 1), ("psync", jobs, 1)] if engine == "io_uring" else []
        configs.append((engine, jobs, depth))
        if engine == "io_uring":
            configs.append((engine, 1, BATCH))
        # Twins: fio's J jobs at iodepth D against kvtier's J client threads with batches of D
        # pages. kvtier's main run (1 thread, batches of 128) is the twin of io_uring x1 qd128.
        twins = {f"{e} x{j} qd{qd}": (j, qd) for e, j, qd in configs}
        # Direct I/O twins, at kvtier's total queue depth: io_uring x2 qd64 against 2 threads
        # with batches of 64; io_uring x1 qd128 against 1 thread with blocking batches of 128
        # (a synchronous caller: the queue drains at each batch's end) and against 1 thread
        # keeping 2 batches of 64 in flight with the async API (fio's queue never drains
        # either). posix: the one same-depth configuration.
        dtwins = {}
        for e, j, qd in configs:
            if e == "psync" and engine == "psync":
                dtwins[f"{e} x{j} qd{qd} / {j} x {qd}"] = (e, j, qd, j, qd, 1)
            elif e == "io_uring" and j * qd == jobs * depth:
                dtwins[f"{e} x{j} qd{qd} / {j} x {qd}"] = (e, j, qd, j, qd, 1)
                if j == 1:
                    dtwins[f"{e} x{j} qd{qd} / 1 x 2x{qd // 2} in flight"] = (e, j, qd, 1,
                                                                            qd // 2, 2)

        def fio_write_read(label, eng, j, qd, direct):
            """fio writes the pages' files, then reads them (buffered writes after the same
            conditioning as kvtier's); recorded as fio_{b,d}{w,r}@label."""
            remove_fio_files(args.dir)
            if not direct:
                condition(args.dir, shape, pages)
            for mode, rw in (("w", "write"), ("r", "read")):
                gbps, cpu = fio_files(args.dir, shape, pages, j, rw, eng, qd, direct)
                key = f"{'d' if direct else 'b'}{mode}@{label}"
                add(f"fio_{key}", gbps)
                add(f"cpu_fio_{key}", cpu)
            remove_fio_files(args.dir)

        # A unit is one kvtier measurement and its fio twin, run back to back (in alternating
        # order from round to round), so each round gives a ratio of two runs taken minutes
        # apart at most: drift of the VM between rounds cancels out of the ratio.
        def buffered_unit(label, threads, batch):
            def kv():
                condition(args.dir, shape, pages)
                k = kvtier_bench(args.dir, shape, pages, direct=False, threads=threads, batch=batch)
                condition(args.dir, shape, pages)
                kun = kvtier_bench(args.dir, shape, pages, direct=False, checksum=False,
                                   threads=threads, batch=batch)
                add(f"kvtwin_bw@{label}", k["write_gbps"])
                add(f"kvtwin_br@{label}", k["read_gbps"])
                add(f"kvtwin_brn@{label}", kun["read_gbps"])
                if (threads, batch) == (1, BATCH):
                    add("kv_bw", k["write_gbps"])
                    add("kv_br", k["read_gbps"])
                    add("kv_br_nosum", kun["read_gbps"])
                    add("cpu_kv_bw", k["write"]["cpu_s_per_gb"])
                    add("cpu_kv_br", k["read"]["cpu_s_per_gb"])

            def fio():
                if label is None:
                    return
                eng, j, qd = next(c for c in configs if f"{c[0]} x{c[1]} qd{c[2]}" == label)
                fio_write_read(label, eng, j, qd, direct=False)
            return kv, fio

        def direct_unit(label, eng, j, qd, threads, batch, in_flight):
            def kv():
                k = kvtier_bench(args.dir, shape, pages, direct=True, threads=threads, batch=batch,
                                 in_flight=in_flight)
                add(f"kvtwin_dw@{label}", k["write_gbps"])
                add(f"kvtwin_dr@{label}", k["read_gbps"])
                if (threads, batch, in_flight) == (1, BATCH, 1):
                    add("kv_dw", k["write_gbps"])
                    add("kv_dr", k["read_gbps"])
                    add("cpu_kv_dw", k["write"]["cpu_s_per_gb"])
                    add("cpu_kv_dr", k["read"]["cpu_s_per_gb"])

            def fio():
                fio_write_read(label, eng, j, qd, direct=True)
            return kv, fio

        units = [buffered_unit(label, *tb) for label, tb in twins.items()]
        if (1, BATCH) not in twins.values():
            units.append(buffered_unit(None, 1, BATCH))  # kvtier's main run, no fio twin
        units += [direct_unit(label, *spec) for label, spec in dtwins.items()]
        if not any(spec[3:] == (1, BATCH, 1) for spec in dtwins.values()):
            units.append((direct_unit(None, None, 0, 0, 1, BATCH, 1)[0], lambda: None))

        # Discarded rounds before measuring, into a scratch record.
        kept = r
        for _ in range(args.warmup):
            r = {}
            for kv, fio in units:
                kv()
                fio()
        r = kept
        for rep in range(args.reps):
            for kv, fio in units:
                first, second = (kv, fio) if rep % 2 == 0 else (fio, kv)
                first()
                second()

        def paired(kv_key, fio_key):
            """The ratio of each round's two runs: (median, min, max)."""
            ratios = [k / f for k, f in zip(r.get(kv_key, []), r.get(fio_key, [])) if f]
            return (med(ratios), min(ratios), max(ratios)) if ratios else (0.0, 0.0, 0.0)

        def fmt_ratio(t):
            return f"{t[0]:.2f} ({t[1]:.2f}-{t[2]:.2f})"

        mc = run([MEMCPY, "--page-bytes", str(page), "--pages", str(pages), "--batch",
                  str(BATCH), "--reps", "5"])
        memcpy = json.loads(mc)["memcpy_gbps"]
        shape_report = {"page_bytes": page, "piece_bytes": piece, "pages": pages,
                        "kvtier_backend": backend, "fio_same_queue_depth": same,
                        "memcpy_one_core_gbps": memcpy, "runs": r}
        report["shapes"][shape] = shape_report

        print(f"== {shape}: {pages} pages of {page:,} B ({page // piece} x {piece:,} B pieces)")
        print(f"   kvtier: {backend}, payload chunks hashed the faster way on this CPU (CRC-64 "
              f"or XXH3), headers XXH3; "
              f"fio at the same depth: {same}")
        print(f"   GB/s are medians (min-max) of {args.reps} rounds; a ratio is the median "
              f"(min-max) of the rounds' kvtier/fio ratios")
        print(f"   {'':15} {'kvtier GB/s':>19} {'fio GB/s, same qd':>19} {'ratio':>17} "
              f"{'CPU s/GB kv/fio':>16}")
        same_direct = next((lab for lab, spec in dtwins.items()
                            if f"{spec[0]} x{spec[1]} qd{spec[2]}" == same), None)
        for key, name in [("bw", "buffered write"), ("br", "buffered read"),
                          ("dw", "direct write"), ("dr", "direct read")]:
            fio_label = same if key in ("bw", "br") else same_direct
            kv, fo = r[f"kv_{key}"], r.get(f"fio_{key}@{fio_label}", [])
            ratio = paired(f"kv_{key}", f"fio_{key}@{fio_label}")
            cpu = f"{med(r[f'cpu_kv_{key}']):.2f}/{med(r.get(f'cpu_fio_{key}@{fio_label}', [])):.2f}"
            print(f"   {name:15} {fmt_range(kv):>19} {fmt_range(fo):>19} {fmt_ratio(ratio):>17} "
                  f"{cpu:>16}")
            shape_report[f"ratio_{key}_same_qd"] = ratio[0]
            shape_report[f"ratio_{key}_same_qd_range"] = ratio[1:]
        print(f"   twin configurations (fio J jobs at iodepth D / kvtier J threads, batches of D):")
        print(f"   {'':22} {'buffered write':>31} {'hot read':>31} {'hot read, unverified':>31}")
        print(f"   {'fio config':22}" + f" {'fio':>6} {'kvtier':>6} {'ratio':>17}" * 3)
        for label in twins:
            cells = ""
            for key in ("bw", "br", "brn"):
                fkey = "br" if key == "brn" else key
                fo, kv = med(r[f"fio_{fkey}@{label}"]), med(r[f"kvtwin_{key}@{label}"])
                ratio = paired(f"kvtwin_{key}@{label}", f"fio_{fkey}@{label}")
                cells += f" {fo:6.2f} {kv:6.2f} {fmt_ratio(ratio):>17}"
                shape_report[f"ratio_{key}_twin@{label}"] = ratio[0]
            print(f"   {label:22}{cells}")
        print(f"   direct I/O twins at kvtier's total queue depth (GB/s):")
        print(f"   {'fio config / kvtier threads x batch':40} {'write fio':>9} {'kvtier':>6} "
              f"{'ratio':>17} {'read fio':>9} {'kvtier':>6} {'ratio':>17}")
        for label in dtwins:
            cells = ""
            for key in ("dw", "dr"):
                fo, kv = med(r[f"fio_{key}@{label}"]), med(r[f"kvtwin_{key}@{label}"])
                ratio = paired(f"kvtwin_{key}@{label}", f"fio_{key}@{label}")
                cells += f" {fo:9.2f} {kv:6.2f} {fmt_ratio(ratio):>17}"
                shape_report[f"ratio_{key}_twin@{label}"] = ratio[0]
                shape_report[f"ratio_{key}_twin@{label}_range"] = ratio[1:]
            print(f"   {label:40}{cells}")
        for key, name in [("bw", "buffered write"), ("br", "hot read"),
                          ("brn", "hot read, payload checksums not verified")]:
            fkey = "br" if key == "brn" else key
            fbest = max(twins, key=lambda lab: med(r[f"fio_{fkey}@{lab}"]))
            kbest = max(twins, key=lambda lab: med(r[f"kvtwin_{key}@{lab}"]))
            # Each round's best kvtier configuration against that round's best fio one.
            ratios = [max(r[f"kvtwin_{key}@{lab}"][i] for lab in twins) /
                      max(r[f"fio_{fkey}@{lab}"][i] for lab in twins) for i in range(args.reps)]
            ratio = (med(ratios), min(ratios), max(ratios))
            kb_threads, kb_batch = twins[kbest]
            print(f"   best against best, {name}: kvtier {med(r[f'kvtwin_{key}@{kbest}']):.2f} "
                  f"({kb_threads} thread(s), batches of {kb_batch}) / fio "
                  f"{med(r[f'fio_{fkey}@{fbest}']):.2f} ({fbest}): {fmt_ratio(ratio)}")
            shape_report[f"ratio_{key}_best"] = ratio[0]
            shape_report[f"ratio_{key}_best_range"] = ratio[1:]
            shape_report[f"fio_best_{key}"] = fbest
            shape_report[f"kvtier_best_{key}"] = {"threads": kb_threads, "batch": kb_batch}
        costs = [1 - v / u for v, u in zip(r["kv_br"], r["kv_br_nosum"]) if u]
        shape_report["checksum_cost"] = med(costs)
        shape_report["checksum_cost_range"] = (min(costs), max(costs)) if costs else (0, 0)
        best_read = max(med(r[f"kvtwin_br@{lab}"]) for lab in twins)
        shape_report["read_vs_memcpy"] = med(r["kv_br"]) / memcpy if memcpy else 0
        shape_report["best_read_vs_memcpy"] = best_read / memcpy if memcpy else 0
        print(f"   memcpy, one core, same footprint (every page into the batch's slots): "
              f"{memcpy:.2f} GB/s; kvtier's hot read is {shape_report['read_vs_memcpy']:.2f}x "
              f"that with 1 thread, {shape_report['best_read_vs_memcpy']:.2f}x at its best")
        print(f"   payload verification costs {med(costs) * 100:.1f}% "
              f"({min(costs) * 100:.1f}-{max(costs) * 100:.1f}%) of hot-read throughput "
              f"({med(r['kv_br']):.2f} GB/s with it, {med(r['kv_br_nosum']):.2f} without)\n")

    if os.path.exists(MICRO):
        out = run([MICRO, "--benchmark_filter=BatchExists128", "--benchmark_format=json"])
        b = json.loads(out)["benchmarks"][0]
        report["batch_exists_128_us"] = b["real_time"]
        print(f"batch_exists of 128 keys: {b['real_time']:.1f} us per call "
              f"({b['real_time'] / 128 * 1000:.0f} ns per key)")
        # Verification's cost measured in one process: hot batch_get of 128 pages from 256
        # stored, verified and unverified runs interleaved at random (median of 5 each).
        out = run([MICRO, "--benchmark_filter=GetBatch128/(4194304|1310720)/",
                   "--benchmark_repetitions=5", "--benchmark_enable_random_interleaving=true",
                   "--benchmark_report_aggregates_only=true", "--benchmark_format=json"])
        rates = {}
        for b in json.loads(out)["benchmarks"]:
            if b.get("aggregate_name") == "median":
                page, verify = b["run_name"].split("/")[1:3]
                rates[(int(page), verify == "1")] = b["bytes_per_second"] / 1e9
        report["microbench_checksum_cost"] = {}
        for page in sorted({p for p, _ in rates}, reverse=True):
            v, u = rates.get((page, True), 0), rates.get((page, False), 0)
            cost = 1 - v / u if u else 0
            report["microbench_checksum_cost"][page] = cost
            print(f"hot batch_get of 128 pieces of {page:,} B in one process (microbenchmark): "
                  f"{v:.2f} GB/s verified, {u:.2f} unverified: verification costs "
                  f"{cost * 100:.1f}%")
    # The same check without kvtier: 2 threads pread 8 MiB hot files in 256 KiB chunks into a
    # 512 MiB pool each, the store's chunk hash of every chunk right after its read in
    # alternate rounds.
    floor = json.loads(run([FLOOR, "--dir", args.dir, "--threads", "2", "--files", "128",
                            "--pool-mib", "512", "--reps", "5"]))
    report["verify_floor"] = floor
    print(f"the same check without kvtier (kvtier_verify_floor, 2 threads): pread at "
          f"{floor['read_gbps']:.2f} GB/s, with {floor['hash']} {floor['read_hashed_gbps']:.2f}: "
          f"verification costs {floor['hash_cost'] * 100:.1f}%")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"\nfull results: {args.json_out}")


def queue_shape(description):
    """(jobs, depth, fio engine) matching kvtier's backend: rings x depth for uring,
    threads x 1 (psync) for posix."""
    words = description.replace(",", " ").split()
    if description.startswith("uring"):
        rings = int(words[words.index("rings") - 1])
        depth = int(words[words.index("requests") - 1])
        return rings, depth, "io_uring"
    threads = int(words[words.index("threads") - 1]) if "threads" in words else 1
    return threads, 1, "psync"


if __name__ == "__main__":
    main()
