#!/usr/bin/env python3
"""kvtier against plain parallel curl on an S3 server, side by side, in one run.

For each page size: `kvtier bench --uri s3://...` (batches of 128, PUT then GET, every byte
verified) and one curl process moving the same number of objects of the same size with
`--parallel --parallel-max <kvtier's max_parallel>` (SigV4 signed, connections reused), PUT
from files in memory (/dev/shm) and GET to /dev/null. Rounds alternate which goes first;
medians (min-max) of --reps rounds, and the ratio kvtier/curl.

Needs the server's variables (tests/s3/server.sh start prints them):
  KVTIER_TEST_S3_ENDPOINT, KVTIER_TEST_S3_BUCKET, [KVTIER_TEST_S3_REGION],
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY

  bench/s3_compare.py [--sizes 1048576,4194304] [--pages 128] [--reps 3] [--parallel 32]
      [--baseline OTHER_KVTIER_BINARY]

--baseline runs another kvtier binary (an earlier build) in the same rounds, in turn with
the others, and prints its GB/s and the ratio of this build to it.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVTIER = os.path.join(ROOT, "build", "bin", "kvtier")


def env(name, default=None):
    value = os.environ.get(name, default)
    if value is None:
        sys.exit(f"{name} is not set (start a server: tests/s3/server.sh start)")
    return value


def kvtier_round(uri, size, pages, parallel, binary=KVTIER):
    out = subprocess.run([binary, "bench", "--uri", f"{uri}&max_parallel={parallel}",
                          "--page-bytes", str(size), "--pages", str(pages), "--batch", "128",
                          "--json"], check=True, stdout=subprocess.PIPE, text=True).stdout
    j = json.loads(out)
    if not j["verified"]:
        sys.exit(f"kvtier bench did not verify: {out}")
    return j["write_gbps"], j["read_gbps"]


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
    t0 = time.perf_counter()
    subprocess.run(put, **quiet)
    t1 = time.perf_counter()
    subprocess.run(get, **quiet)
    t2 = time.perf_counter()
    delete = list(common)
    for u in urls:
        delete += ["-X", "DELETE", "-o", "/dev/null", u]
    subprocess.run(delete, **quiet)
    moved = len(files) * size / 1e9
    return moved / (t1 - t0), moved / (t2 - t1)


def fmt(xs):
    return f"{statistics.median(xs):6.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1048576,4194304")
    ap.add_argument("--pages", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=32)
    ap.add_argument("--baseline", default=None, help="another kvtier binary to run beside")
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
    uri = f"s3://{bucket}/s3-compare?endpoint={endpoint}&region={region}"
    print(f"kvtier vs curl --parallel-max {args.parallel} against {endpoint} "
          f"({os.cpu_count()} CPUs); {args.pages} objects per round, median (min-max) of "
          f"{args.reps}\n")
    print(f"{'object':>10} {'op':>4} {'kvtier GB/s':>22} {'curl GB/s':>22} {'ratio':>6}" +
          (f" {'baseline GB/s':>22} {'/base':>6}" if args.baseline else ""))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(dir=shm) as tmp:
            files = []
            for i in range(args.pages):
                path = os.path.join(tmp, str(i))
                with open(path, "wb") as f:
                    f.write(os.urandom(size))
                files.append(path)
            kv_w, kv_r, cu_w, cu_r, b_w, b_r = [], [], [], [], [], []
            kvtier_round(uri, size, args.pages, args.parallel)  # warm-up, discarded
            sides = [0, 1] + ([2] if args.baseline else [])
            for rep in range(args.reps):
                order = sides[rep % len(sides):] + sides[:rep % len(sides)]
                for which in order:
                    if which == 0:
                        w, r = kvtier_round(uri, size, args.pages, args.parallel)
                        kv_w.append(w)
                        kv_r.append(r)
                    elif which == 2:
                        w, r = kvtier_round(uri, size, args.pages, args.parallel, args.baseline)
                        b_w.append(w)
                        b_r.append(r)
                    else:
                        w, r = curl_round(endpoint, bucket, region, f"curl-{size}", files, size,
                                          args.parallel)
                        cu_w.append(w)
                        cu_r.append(r)
        for op, kv, cu, base in (("PUT", kv_w, cu_w, b_w), ("GET", kv_r, cu_r, b_r)):
            ratio = statistics.median(kv) / statistics.median(cu)
            extra = (f" {fmt(base):>22} {statistics.median(kv) / statistics.median(base):6.2f}"
                     if base else "")
            print(f"{size:>10} {op:>4} {fmt(kv):>22} {fmt(cu):>22} {ratio:6.2f}{extra}")


if __name__ == "__main__":
    main()
