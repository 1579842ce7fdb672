#!/usr/bin/env python3
"""What a lookup with a miss costs on an S3 store of packed pages (layout=segments), by the
number of segments it holds, with lookups looking at most once per `refresh_ms` (the default
on an object store) and on every miss (refresh_ms=0).

One store writes N pages of 64 KiB (16 to a 1 MiB segment object, so N/16 segments); a second
store, opened before they were written as another host's would be, finds them with one
untimed lookup, then calls `batch_exists([a stored key, a missing key])` --calls times, as a
serving engine does for requests whose prefix ends in pages not stored. Prints ms per call
and the looks at the other writers' summaries the timed calls made
(`stats()["segment_looks"]`; each a LIST of the segment prefix, one request per 1,000 names).
The two settings take turns, page count by page count.

Needs the server's variables (tests/s3/server.sh start prints them), e.g.
  scripts/loopback-only scripts/with-s3-server bash -c 'set -a; . "$KVTIER_TEST_S3_ENV_FILE";
      set +a; PYTHONPATH=build/python /usr/bin/python3 bench/s3_lookup_cost.py
      --pages 2048,16384,32768'
The OSD holds about 2 bytes of memory per stored byte, up to KVTIER_S3_OSD_BYTES (4 GiB):
32,768 pages are 2 GiB of objects.
"""

import argparse
import os
import statistics
import time

import numpy

import kvtier

PAGE = 64 << 10


def run(pages, calls, query, tag):
    endpoint = os.environ["KVTIER_TEST_S3_ENDPOINT"]
    bucket = os.environ["KVTIER_TEST_S3_BUCKET"]
    region = os.environ.get("KVTIER_TEST_S3_REGION", "us-east-1")
    uri = (f"s3://{bucket}/lookup-cost-{tag}?endpoint={endpoint}&region={region}"
           f"&layout=segments{query}")
    writer = kvtier.Store(uri, piece_bytes=PAGE)
    reader = kvtier.Store(uri, piece_bytes=PAGE)  # opened before the pages exist
    pool = numpy.full(128 * PAGE, 7, dtype=numpy.uint8)
    with writer.register_memory(pool):
        views = [pool[i * PAGE:(i + 1) * PAGE] for i in range(128)]
        for first in range(0, pages, 128):
            n = min(128, pages - first)
            r = writer.batch_put([f"k{first + i}" for i in range(n)], views[:n])
            assert r.all_ok, r
    # Untimed: the reader's first lookup finds the writer's summaries and reads them all.
    assert reader.batch_exists(["k0", "missing"]) == 1
    looked = reader.stats()["segment_looks"]
    spent = []
    for c in range(calls):
        t = time.perf_counter()
        got = reader.batch_exists([f"k{c % pages}", f"missing-{c}"])
        spent.append(time.perf_counter() - t)
        assert got == 1, got
    looks = reader.stats()["segment_looks"] - looked
    writer.clear()
    writer.close()
    reader.close()
    return spent, looks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", default="2048,16384,32768")
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    for pages in (int(p) for p in args.pages.split(",")):
        for name, query in (("default", ""), ("refresh_ms=0", "&refresh_ms=0")):
            spent, looks = run(pages, args.calls, query, f"{pages}-{len(query)}")
            print(f"{pages} pages ({pages // 16} segments), {name}: batch_exists with a miss "
                  f"{statistics.mean(spent) * 1e3:.1f} ms a call (median "
                  f"{statistics.median(spent) * 1e3:.1f}, max {max(spent) * 1e3:.1f}), "
                  f"{looks} looks in {args.calls} calls", flush=True)


if __name__ == "__main__":
    main()
