#!/usr/bin/env python3
"""Per-page cost of put, exists and get on a local directory, on CephFS and on radosgw, from
one simulated host and from three at once (tests/ceph/cluster.sh: network namespaces on a
bridge, each with its own ceph-fuse mount).

Each host runs one kvtier process (this script with --worker, in the host's namespace), which
opens two stores on the location before anything is written: one puts N pages in batches of
B, the other then asks batch_exists (its index is empty, so every key is a stat or a HEAD)
and gets them (every byte verified). The phases start together on every host. Reported per
(location, hosts, op): pages/s and MB/s over all hosts, the wall time per page on one host,
the median batch latency, and CPU time per page of the kvtier processes and of the Ceph
daemons (OSD, MDS, radosgw, monitor, the ceph-fuse of every host): on a machine with two
cores the daemons share them with the clients, so this is per-operation cost, not scaling.

With --visibility N it measures instead how long after a put returns on host A the page is
seen on host B: B's store is open before A writes, and B asks `exists` in a loop until it
answers yes, then gets the page (N pages, one at a time; median, max and how many took over
100 ms, and how many `exists` calls it took).

--layout segments opens the local and CephFS stores with the segment layout
(file://DIR?layout=segments) instead of a file per page.

  bench/multihost.py [--pages 256] [--batch 16] [--page-bytes 262144] [--reps 1]
                     [--locations local,cephfs,rgw] [--layout files|segments]
                     [--visibility N] [--json]
The cluster's settings come from tests/ceph/cluster.sh's environment variables
(KVTIER_CEPH_MDS_EARLY_REPLY, ...).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")  # the unit of /proc/PID/stat's CPU times

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "tests", "ceph", "cluster.sh")
PYTHONPATH = os.path.join(ROOT, "build", "python")


# ---------------------------------------------------------------- worker (one host)

def worker(args):
    import numpy as np
    import kvtier

    def open_store():
        return kvtier.Store(args.uri, model="multihost-bench", dtype="uint8", layout="flat",
                            page_tokens=1, piece_bytes=args.page_bytes)

    writer, reader = open_store(), open_store()
    pool = np.random.default_rng(1).integers(0, 256, size=args.batch * args.page_bytes,
                                             dtype=np.uint8)
    back = np.zeros_like(pool)
    regs = [writer.register_memory(pool), reader.register_memory(back)]
    keys = [f"{args.host}-{i}" for i in range(args.pages)]
    pages = [pool[i * args.page_bytes:(i + 1) * args.page_bytes] for i in range(args.batch)]
    dst = [back[i * args.page_bytes:(i + 1) * args.page_bytes] for i in range(args.batch)]

    def phase(op):
        sys.stdin.readline()  # the go signal: every host starts the phase together
        lat = []
        bad = 0
        cpu0, t0 = time.process_time(), time.monotonic()
        for s in range(0, args.pages, args.batch):
            ks = keys[s:s + args.batch]
            t = time.monotonic()
            if op == "put":
                bad += len(ks) - writer.batch_put(ks, pages[:len(ks)]).ok_count
            elif op == "exists":
                bad += len(ks) - reader.batch_exists(ks)
            else:
                bad += len(ks) - reader.batch_get(ks, dst[:len(ks)]).ok_count
            lat.append(time.monotonic() - t)
        out = {"op": op, "seconds": time.monotonic() - t0, "cpu_s": time.process_time() - cpu0,
               "batch_p50_ms": statistics.median(lat) * 1e3, "failed": bad}
        print(json.dumps(out), flush=True)

    print(json.dumps({"ready": True}), flush=True)
    for op in ("put", "exists", "get"):
        phase(op)
    sys.stdin.readline()
    reader.clear()
    del regs
    writer.close()
    reader.close()


def visibility_worker(args):
    """Answers "put KEY" (one page, returns when published) and "poll KEY" (exists until yes,
    then a get; prints both times in ms)."""
    import numpy as np
    import kvtier

    store = kvtier.Store(args.uri, model="multihost-bench", dtype="uint8", layout="flat",
                         page_tokens=1, piece_bytes=args.page_bytes)
    page = np.ones(2 * args.page_bytes, dtype=np.uint8)
    reg = store.register_memory(page)
    dst = page[args.page_bytes:]
    page = page[:args.page_bytes]
    print("ready", flush=True)
    for line in sys.stdin:
        op, key = line.split()
        if op == "put":
            print("ok" if store.put(key, page).ok else "failed", flush=True)
            continue
        t0 = time.monotonic()
        deadline = t0 + 30
        asks = 1
        while not (ok := store.exists(key)) and time.monotonic() < deadline:
            asks += 1
        t1 = time.monotonic()
        ok = ok and store.get(key, dst).ok
        t2 = time.monotonic()
        print(f"{'ok' if ok else 'failed'} {(t1 - t0) * 1e3} {(t2 - t1) * 1e3} {asks}",
              flush=True)
    del reg
    store.close()


# ---------------------------------------------------------------- driver

def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            env[k] = v.strip('"')
    return env


def ceph_pids(state):
    """The cluster's processes: those with its ceph.conf on the command line."""
    conf = os.path.join(state, "ceph.conf").encode()
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if conf in f.read().split(b"\0"):
                    pids.append(pid)
        except OSError:
            continue
    return pids


def pid_cpu_s(pid):
    """(program name, CPU seconds so far) of a process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, _, rest = f.read().rpartition(")")
    except OSError:
        return None
    fields = rest.split()
    return head.partition("(")[2], (int(fields[11]) + int(fields[12])) / TICK


def ceph_cpu_s(state):
    """CPU seconds so far of the cluster's processes (its ceph.conf on the command line), by
    program: ceph-osd, ceph-mds, ceph-fuse, radosgw, ceph-mon."""
    total = {}
    for pid in ceph_pids(state):
        got = pid_cpu_s(pid)
        if got is not None:
            total[got[0]] = total.get(got[0], 0.0) + got[1]
    return total


def location_uri(env, kind, host, name, local_dir, layout="files"):
    if kind in ("local", "cephfs"):
        d = os.path.join(local_dir if kind == "local" else env[f"KVTIER_CEPH_MNT_{host}"], name)
        return f"file://{d}?layout={layout}"
    return (f"s3://{env['KVTIER_CEPH_S3_BUCKET']}/{name}?endpoint="
            f"{env['KVTIER_CEPH_S3_ENDPOINT']}&region={env['KVTIER_CEPH_S3_REGION']}")


def location_label(kind, args):
    return kind if args.layout == "files" or kind == "rgw" else f"{kind} ({args.layout})"


def start_worker(state, env, host, mode_args):
    cmd = [CLUSTER, "exec", state, host, sys.executable, os.path.abspath(__file__), *mode_args]
    penv = dict(os.environ, PYTHONPATH=PYTHONPATH, AWS_ACCESS_KEY_ID=env["AWS_ACCESS_KEY_ID"],
                AWS_SECRET_ACCESS_KEY=env["AWS_SECRET_ACCESS_KEY"])
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=penv)


def run_visibility(state, env, kind, hosts, args, local_dir):
    name = f"vis-{time.time_ns()}"
    procs = [start_worker(state, env, h,
                          ["--worker-visibility", "--uri",
                           location_uri(env, kind, h, name, local_dir, args.layout),
                           "--page-bytes", str(args.page_bytes)]) for h in hosts[:2]]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    writer, reader = procs
    seen, read, asks = [], [], []
    for i in range(args.visibility):
        writer.stdin.write(f"put v{i}\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "ok"
        reader.stdin.write(f"poll v{i}\n")
        reader.stdin.flush()
        ok, exists_ms, get_ms, n = reader.stdout.readline().split()
        assert ok == "ok", f"v{i} never seen or not read"
        seen.append(float(exists_ms))
        read.append(float(get_ms))
        asks.append(int(n))
    for p in procs:
        p.stdin.close()
        p.wait(timeout=60)
    return {"location": location_label(kind, args), "pages": len(seen),
            "exists_yes_after_ms": {"median": statistics.median(seen), "max": max(seen),
                                    "over_100ms": sum(t > 100 for t in seen)},
            "then_get_ms": {"median": statistics.median(read), "max": max(read),
                            "over_100ms": sum(t > 100 for t in read)},
            "exists_calls": {"median": statistics.median(asks), "max": max(asks)}}


def run_round(state, env, kind, hosts, args, local_dir):
    name = f"bench-{time.time_ns()}"
    procs = []
    for h in hosts:
        procs.append(start_worker(
            state, env, h,
            ["--worker", "--uri", location_uri(env, kind, h, name, local_dir, args.layout),
             "--host", h,
             "--pages", str(args.pages), "--batch", str(args.batch),
             "--page-bytes", str(args.page_bytes)]))
    for p in procs:
        assert json.loads(p.stdout.readline())["ready"]
    rows = []
    for op in ("put", "exists", "get"):
        c0 = ceph_cpu_s(state)
        t0 = time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        res = [json.loads(p.stdout.readline()) for p in procs]
        wall = time.monotonic() - t0
        c1 = ceph_cpu_s(state)
        ceph = {k: v - c0.get(k, 0.0) for k, v in c1.items()}
        n = args.pages * len(hosts)
        assert all(r["failed"] == 0 for r in res), res
        rows.append({
            "location": location_label(kind, args), "hosts": len(hosts), "op": op,
            "pages_per_s": n / wall,
            "mb_per_s": n * args.page_bytes / wall / 1e6 if op != "exists" else None,
            "us_per_page_one_host": statistics.median(r["seconds"] for r in res) / args.pages * 1e6,
            "batch_p50_ms": statistics.median(r["batch_p50_ms"] for r in res),
            "client_cpu_us_per_page": sum(r["cpu_s"] for r in res) / n * 1e6,
            "ceph_cpu_us_per_page": sum(ceph.values()) / n * 1e6 if kind != "local" else None,
            "ceph_cpu_us_per_page_by_daemon": {k: round(v / n * 1e6) for k, v in ceph.items()
                                               if v > 0} if kind != "local" else None,
        })
    for p in procs:
        p.stdin.write("done\n")
        p.stdin.close()
        p.wait(timeout=120)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--page-bytes", type=int, default=256 << 10)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--locations", default="local,cephfs,rgw")
    ap.add_argument("--layout", choices=("files", "segments"), default="files")
    ap.add_argument("--visibility", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-visibility", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    ap.add_argument("--host", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.worker_visibility:
        return visibility_worker(args)
    kinds = args.locations.split(",")
    assert set(kinds) <= {"local", "cephfs", "rgw"}, kinds

    state = tempfile.mkdtemp(prefix="kvtier-ceph-bench.")
    os.rmdir(state)
    local_dir = tempfile.mkdtemp(prefix="kvtier-local-bench.", dir="/var/tmp")
    start = subprocess.run([CLUSTER, "start", state], stdout=subprocess.PIPE, text=True)
    if start.returncode != 0:
        sys.exit(f"the cluster did not start (exit {start.returncode})")
    try:
        env = read_env(os.path.join(state, "env"))
        hosts = env["KVTIER_CEPH_HOSTS"].split()
        rows = []
        for _ in range(args.reps):
            for kind in kinds:
                if args.visibility:
                    rows.append(run_visibility(state, env, kind, hosts, args, local_dir))
                    continue
                for hs in (hosts[:1], hosts):
                    rows += run_round(state, env, kind, hs, args, local_dir)
    finally:
        subprocess.run([CLUSTER, "stop", state])
        subprocess.run(["rm", "-rf", local_dir])
    if args.json or args.visibility:
        print(json.dumps(rows, indent=1))
        return
    def fmt(v, p=0):
        return "-" if v is None else f"{v:,.{p}f}"

    def by_daemon(r):
        d = r["ceph_cpu_us_per_page_by_daemon"] or {}
        short = {"ceph-osd": "osd", "ceph-mds": "mds", "ceph-fuse": "fuse", "radosgw": "rgw",
                 "ceph-mon": "mon"}
        return ", ".join(f"{short.get(k, k)} {v:,}" for k, v in sorted(d.items(),
                                                                     key=lambda kv: -kv[1]))
    print(f"pages of {args.page_bytes} bytes, {args.pages} a host, batches of {args.batch}\n")
    print("| location | hosts | op | pages/s (all hosts) | MB/s | µs a page (one host) | "
          "batch p50 ms | kvtier CPU µs/page | Ceph CPU µs/page | of which |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['location']} | {r['hosts']} | {r['op']} | {fmt(r['pages_per_s'])} | "
              f"{fmt(r['mb_per_s'])} | {fmt(r['us_per_page_one_host'])} | "
              f"{fmt(r['batch_p50_ms'], 2)} | {fmt(r['client_cpu_us_per_page'])} | "
              f"{fmt(r['ceph_cpu_us_per_page'])} | {by_daemon(r)} |")


if __name__ == "__main__":
    main()
