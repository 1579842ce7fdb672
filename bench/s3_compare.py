#!/usr/bin/env python3
"""kvtier against plain parallel curl on an S3 server, side by side, in one run.

For each page size: `kvtier bench --uri s3://...` (batches of 128, PUT then GET, every byte
verified) and one curl process moving the same number of objects of the same size with
`--parallel --parallel-max <kvtier's max_parallel>` (SigV4 signed, connections reused), PUT
from files in memory (/dev/shm) and GET to /dev/null. Rounds alternate which goes first;
medians (min-max) of --reps rounds, and the ratio kvtier/curl; then the CPU seconds each side
spent per GB moved (medians; kvtier's from its own accounting of each phase, curl's from the
rusage of its processes). The S3 server runs on the same machine and is counted on neither side;
its own CPU seconds per GB while each side's round runs (radosgw, ceph-osd and ceph-mon, from
/proc) are printed beside, and during the timed PUT and GET alone (sampled every 10 ms while
kvtier bench runs, which reports where its phases lay on the monotonic clock; read before and
after each of curl's processes). The rounds are not alike for the server: curl's is PUT, GET and
DELETE; kvtier bench's is its open, PUT, three reads (a warm-up batch, the timed read, the
byte check) and its clear.

Needs the server's variables (tests/s3/server.sh start prints them):
  KVTIER_TEST_S3_ENDPOINT, KVTIER_TEST_S3_BUCKET, [KVTIER_TEST_S3_REGION],
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY

  bench/s3_compare.py [--sizes 1048576,4194304] [--pages 128] [--reps 3] [--parallel 32]
      [--layout files|segments] [--curl-object-bytes N]
      [--baseline OTHER_KVTIER_BINARY] [--baseline-query '&loops=1']

--layout segments packs kvtier's pages into segment objects (layout=segments); with
--curl-object-bytes N curl moves the same bytes as objects of N bytes (e.g. 64 KiB pages
packed, against curl moving 1 MiB objects).

--baseline runs another kvtier binary (an earlier build) in the same rounds, in turn with
the others, and prints its GB/s and the ratio of this build to it. --baseline-query appends
URI parameters to the baseline's location (alone: this build with other parameters, e.g.
one event loop against the default).
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# bench/multihost.py: a Ceph's daemons and their CPU seconds
from multihost import ceph_cpu_s, ceph_pids, pid_cpu_s

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVTIER = os.path.join(ROOT, "build", "bin", "kvtier")


def env(name, default=None):
    value = os.environ.get(name, default)
    if value is None:
        sys.exit(f"{name} is not set (start a server: tests/s3/server.sh start)")
    return value


def kvtier_round(uri, size, pages, parallel, binary=KVTIER):
    s0, w0 = server_cpu(), time.perf_counter()
    with ServerSampler() as sampler:
        out = subprocess.run([binary, "bench", "--uri", f"{uri}&max_parallel={parallel}",
                              "--page-bytes", str(size), "--pages", str(pages), "--batch", "128",
                              "--json"], check=True, stdout=subprocess.PIPE, text=True).stdout
    j = json.loads(out)
    if not j["verified"]:
        sys.exit(f"kvtier bench did not verify: {out}")
    # The server's CPU over the whole run (open, PUT, the warm-up, timed and checking reads,
    # the clear), per GB moved each way: the bench runs all of it in one process.
    server = server_load(s0, w0, 2 * pages * size / 1e9)
    # And over the timed PUT and GET phases alone, where the bench says they lay on the
    # monotonic clock (older builds do not: None).
    phases = []
    for phase in ("write", "read"):
        began, ended = (j.get(phase, {}).get(f"monotonic_{e}_s") for e in ("began", "ended"))
        phases += sampler.load(began, ended, pages * size / 1e9)
    # CPU per GB: older builds' JSON lacks it (None)
    return (j["write_gbps"], j["read_gbps"], j.get("write", {}).get("cpu_s_per_gb"),
            j.get("read", {}).get("cpu_s_per_gb"), *server, *phases)


def children_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def server_cpu():
    """CPU seconds so far of the tests' Ceph S3 server (tests/s3/server.sh), whose state
    directory holds the env file; 0 without one."""
    state = os.path.dirname(os.environ.get("KVTIER_TEST_S3_ENV_FILE", ""))
    return sum(ceph_cpu_s(state).values()) if state else 0.0


def server_pids():
    """The processes of the tests' Ceph S3 server."""
    state = os.path.dirname(os.environ.get("KVTIER_TEST_S3_ENV_FILE", ""))
    return ceph_pids(state) if state else []


class ServerSampler:
    """The server's CPU seconds, read from /proc/PID/stat of its processes every 10 ms on a
    thread while a command runs, against time.monotonic(): what the server spent during a
    phase that the command reports on the same clock, to the clock tick (10 ms)."""

    def __init__(self):
        self.pids = server_pids()
        self.samples = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def cpu(self):
        return sum(got[1] for got in map(pid_cpu_s, self.pids) if got is not None)

    def _run(self):
        while True:
            self.samples.append((time.monotonic(), self.cpu()))
            if self.done.wait(0.01):
                self.samples.append((time.monotonic(), self.cpu()))
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def at(self, t):
        """CPU seconds at monotonic time t, interpolated between the samples around it."""
        before = [x for x in self.samples if x[0] <= t]
        after = [x for x in self.samples if x[0] >= t]
        if not before or not after:
            return None
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)

    def load(self, began, ended, moved_gb):
        """The server's CPU seconds per GB over [began, ended], and the cores it kept busy."""
        if not self.pids or began is None or ended is None or ended <= began:
            return None, None
        c0, c1 = self.at(began), self.at(ended)
        if c0 is None or c1 is None:
            return None, None
        return (c1 - c0) / moved_gb, (c1 - c0) / (ended - began)


def server_load(before, started, moved_gb):
    """The server's CPU seconds since `before` per GB moved, and the cores it kept busy."""
    cpu = server_cpu() - before
    return cpu / moved_gb, cpu / (time.perf_counter() - started)


def curl_round(endpoint, bucket, region, prefix, files, size, parallel):
    auth = ["--aws-sigv4", f"aws:amz:{region}:s3", "--user",
            f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    common = ["curl", "-s", "-S", "-f", "--no-progress-meter", "--parallel", "--parallel-max",
              str(parallel), *auth]
    urls = [f"{endpoint}/{bucket}/{prefix}/{i}" for i in range(len(files))]
    put = list(common)
    for f, u in zip(files, urls):
        put += ["-T", f, u]
    get = list(common)
    for u in urls:
        get += ["-o", "/dev/null", u]
    quiet = {"check": True, "stdout": subprocess.DEVNULL}
    clock = ServerSampler()  # not started: read at the phases' edges only
    s0 = server_cpu()
    c0, t0 = children_cpu(), time.perf_counter()  # the server's load: from t0 to the removes' end
    p0 = clock.cpu()
    subprocess.run(put, **quiet)
    c1, t1 = children_cpu(), time.perf_counter()
    p1 = clock.cpu()
    subprocess.run(get, **quiet)
    c2, t2 = children_cpu(), time.perf_counter()
    p2 = clock.cpu()
    delete = list(common)
    for u in urls:
        delete += ["-X", "DELETE", "-o", "/dev/null", u]
    subprocess.run(delete, **quiet)
    moved = len(files) * size / 1e9
    phases = ((p1 - p0) / moved, (p1 - p0) / (t1 - t0), (p2 - p1) / moved, (p2 - p1) / (t2 - t1)) \
        if clock.pids else (None,) * 4
    return (moved / (t1 - t0), moved / (t2 - t1), (c1 - c0) / moved, (c2 - c1) / moved,
            *server_load(s0, t0, 2 * moved), *phases)


def fmt(xs):
    return f"{statistics.median(xs):6.3f} ({min(xs):.3f}-{max(xs):.3f})"


def med(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.2f}" if xs else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1048576,4194304")
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=32)
    ap.add_argument("--layout", default="files", choices=["files", "segments"],
                    help="kvtier's layout on the bucket (segments: small pages packed)")
    ap.add_argument("--curl-object-bytes", type=int, default=0,
                    help="curl moves the same bytes as objects of this size (default: the page "
                         "size)")
    ap.add_argument("--baseline", default=None, help="another kvtier binary to run beside")
    ap.add_argument("--baseline-query", default="",
                    help="URI parameters for the baseline side, e.g. '&loops=1'")
    args = ap.parse_args()
    if not os.path.exists(KVTIER):
        sys.exit(f"{KVTIER} is missing: run `make build` first")
    if shutil.which("curl") is None:
        sys.exit("curl is needed")
    endpoint = env("KVTIER_TEST_S3_ENDPOINT")
    bucket = env("KVTIER_TEST_S3_BUCKET")
    region = env("KVTIER_TEST_S3_REGION", "us-east-1")
    env("AWS_ACCESS_KEY_ID")
    env("AWS_SECRET_ACCESS_KEY")
    uri = f"s3://{bucket}/s3-compare?endpoint={endpoint}&region={region}&layout={args.layout}"
    baseline = args.baseline or (KVTIER if args.baseline_query else None)
    print(f"kvtier vs curl --parallel-max {args.parallel} against {endpoint} "
          f"({os.cpu_count()} CPUs); {args.pages} pages per round (kvtier layout "
          f"{args.layout}), median (min-max) of {args.reps}" + (f"; baseline: {baseline} {args.baseline_query}" if baseline else "") +
          "\n")
    print("server CPU: the S3 server's CPU seconds over a whole round per GB moved each way (curl: "
          "PUT, GET, DELETE; kvtier bench: also its open, warm-up and byte-check reads and clear), "
          "and the cores it kept busy (CPU seconds / the round's wall seconds)\n")
    print("phase: the server's CPU seconds per GB during the timed PUT or GET alone, and its "
          "cores busy then (kvtier: the bench's phase, as it reports it on the monotonic clock; "
          "curl: its PUT or GET process), sampled every 10 ms, to the clock tick\n")
    print(f"{'object':>10} {'op':>4} {'kvtier GB/s':>22} {'curl GB/s':>22} {'ratio':>6}" +
          f" {'CPU s/GB kvtier':>15} {'curl':>5} {'server CPU kvtier':>17} {'curl':>5}"
          f" {'cores':>5} {'curl':>5} {'phase s/GB kvtier':>17} {'curl':>5} {'cores kvtier':>11}"
          f" {'curl':>5}" +
          (f" {'baseline GB/s':>22} {'/base':>6} {'base CPU':>8}" if baseline else ""))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    for size in (int(s) for s in args.sizes.split(",")):
        sides = {name: tuple([] for _ in range(10)) for name in ("kvtier", "curl", "baseline")}
        # curl moves the same bytes, as objects of the page size or --curl-object-bytes.
        curl_size = args.curl_object_bytes or size
        curl_objects = max(1, args.pages * size // curl_size)
        with tempfile.TemporaryDirectory(dir=shm) as tmp:
            files = []
            for i in range(curl_objects):
                path = os.path.join(tmp, str(i))
                with open(path, "wb") as f:
                    f.write(os.urandom(curl_size))
                files.append(path)
            kvtier_round(uri, size, args.pages, args.parallel)  # warm-up, discarded
            names = ["kvtier", "curl"] + (["baseline"] if baseline else [])
            for rep in range(args.reps):
                order = names[rep % len(names):] + names[:rep % len(names)]
                for which in order:
                    if which == "kvtier":
                        got = kvtier_round(uri, size, args.pages, args.parallel)
                    elif which == "baseline":
                        got = kvtier_round(uri + args.baseline_query, size, args.pages,
                                           args.parallel, baseline)
                    else:
                        got = curl_round(endpoint, bucket, region, f"curl-{curl_size}", files,
                                         curl_size, args.parallel)
                    for column, value in zip(sides[which], got):
                        column.append(value)
        kv, cu, base = sides["kvtier"], sides["curl"], sides["baseline"]
        for op, i in (("PUT", 0), ("GET", 1)):
            ratio = statistics.median(kv[i]) / statistics.median(cu[i])
            extra = ""
            if baseline:
                to_base = statistics.median(kv[i]) / statistics.median(base[i])
                extra = f" {fmt(base[i]):>22} {to_base:6.2f} {med(base[i + 2]):>8}"
            server = (f" {med(kv[4]):>17} {med(cu[4]):>5} {med(kv[5]):>5} {med(cu[5]):>5}"
                      if op == "PUT" else " " * 36)
            j = 6 + 2 * i  # the server during this phase alone
            phase = (f" {med(kv[j]):>17} {med(cu[j]):>5} {med(kv[j + 1]):>11} "
                     f"{med(cu[j + 1]):>5}")
            print(f"{size:>10} {op:>4} {fmt(kv[i]):>22} {fmt(cu[i]):>22} {ratio:6.2f}"
                  f" {med(kv[i + 2]):>15} {med(cu[i + 2]):>5}{server}{phase}{extra}", flush=True)


if __name__ == "__main__":
    main()
