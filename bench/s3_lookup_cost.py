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

--through sglang makes the same calls through SGLang's: kvtier.sglang.HiCacheKvtier configured
with only `uri`, pages written with batch_set_v1 and looked up with batch_exists (DeepSeek-V3
MLA pages of page_size 1, 70,272 B; a batch of 128 again goes up as 8 segments).

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
import sys
import time

import numpy

import kvtier

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = 64 << 10


class StoreSide:
    """The store's own calls: pages of 64 KiB through kvtier.Store."""

    def __init__(self, uri):
        self.store = kvtier.Store(uri, piece_bytes=PAGE)
        self.pool = numpy.full(128 * PAGE, 7, dtype=numpy.uint8)

    def write(self, keys):
        with self.store.register_memory(self.pool):
            r = self.store.batch_put(keys, [self.pool[i * PAGE:(i + 1) * PAGE]
                                            for i in range(len(keys))])
            assert r.all_ok, r

    def batch_exists(self, keys):
        return self.store.batch_exists(keys)

    def looks(self):
        return self.store.stats()["segment_looks"]

    def close(self, clear=False):
        if clear:
            self.store.clear()
        self.store.close()


class SGLangSide:
    """SGLang's own calls (kvtier.sglang.HiCacheKvtier configured with only `uri`, as
    python/tests/sglang_fakes.py builds SGLang's config): DeepSeek-V3 MLA pages of page_size 1
    (61 layers of a 576-wide bf16 latent: 70,272 B), batch_set_v1 and batch_exists."""

    def __init__(self, uri):
        sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
        import torch
        from fakes import HostPool
        from sglang_fakes import storage_config
        import kvtier.sglang

        self.torch = torch
        config = storage_config(layout="page_first", mla=True)
        config.extra_config = {"interface_v1": True, "uri": uri}
        self.pool = HostPool(layout="page_first", mla=True, backing="torch", tokens=128,
                             page_size=1, layers=61, kv_lora_rank=512, qk_rope_head_dim=64)
        self.adapter = kvtier.sglang.HiCacheKvtier(config, {})
        self.adapter.register_mem_pool_host(self.pool)

    def write(self, keys):
        got = self.adapter.batch_set_v1(keys, self.torch.arange(len(keys)))
        assert all(got), got

    def batch_exists(self, keys):
        return self.adapter.batch_exists(keys)

    def looks(self):
        return self.adapter.counters()["store"]["segment_looks"]

    def close(self, clear=False):
        if clear:
            self.adapter.clear()
        self.adapter.close()


def run(side, pages, calls, query, tag):
    endpoint = os.environ["KVTIER_TEST_S3_ENDPOINT"]
    bucket = os.environ["KVTIER_TEST_S3_BUCKET"]
    region = os.environ.get("KVTIER_TEST_S3_REGION", "us-east-1")
    uri = (f"s3://{bucket}/lookup-cost-{tag}?endpoint={endpoint}&region={region}"
           f"&layout=segments{query}")
    writer = side(uri)
    reader = side(uri)  # opened before the pages exist
    for first in range(0, pages, 128):
        writer.write([f"k{first + i}" for i in range(min(128, pages - first))])
    # Untimed: the reader's first lookup finds the writer's summaries and reads them all.
    assert reader.batch_exists(["k0", "missing"]) == 1
    looked = reader.looks()
    spent = []
    for c in range(calls):
        t = time.perf_counter()
        got = reader.batch_exists([f"k{c % pages}", f"missing-{c}"])
        spent.append(time.perf_counter() - t)
        assert got == 1, got
    looks = reader.looks() - looked
    writer.close(clear=True)
    reader.close()
    return spent, looks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", default="2048,16384,32768")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--through", choices=("store", "sglang"), default="store",
                    help="kvtier.Store's calls, or SGLang's (the adapter's batch_exists)")
    args = ap.parse_args()
    side = StoreSide if args.through == "store" else SGLangSide
    for pages in (int(p) for p in args.pages.split(",")):
        for name, query in (("default", ""), ("refresh_ms=0", "&refresh_ms=0")):
            spent, looks = run(side, pages, args.calls, query,
                               f"{args.through}-{pages}-{len(query)}")
            print(f"{pages} pages ({pages // 16} segments), {name}: batch_exists with a miss "
                  f"{statistics.mean(spent) * 1e3:.1f} ms a call (median "
                  f"{statistics.median(spent) * 1e3:.1f}, max {max(spent) * 1e3:.1f}), "
                  f"{looks} looks in {args.calls} calls", flush=True)


if __name__ == "__main__":
    main()
