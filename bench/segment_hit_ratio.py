#!/usr/bin/env python3
"""Hit ratio of the segment layout's reclaim against the file-per-page layout's LRU.

A synthetic prefix-reuse trace, as a HiCache-style server sees it: --prefixes shared prefixes
(system prompts, documents, conversations), each of 4-16 pages; every request picks a prefix
by a Zipf law (--alpha), reuses a random leading part of it, and adds 1-4 pages of its own
that no later request asks for. For each request the store is asked, as SGLang does, how
many leading pages it holds (batch_exists), those are read (batch_get: reads count as use),
and the rest are written (batch_put). The hit ratio is pages found / prefix pages asked for.

The same trace runs against each layout at the same capacity_bytes; a second segments run
holds as many pages as the files run could (the capacity scaled by the two layouts' bytes
per page: a page file carries a 4 KiB header, a compact record ~200 bytes), so the policy is
compared apart from the space each layout saves.

  PYTHONPATH=build/python bench/segment_hit_ratio.py [--dir DIR] [--page 65536]
      [--capacity 64M] [--prefixes 600] [--requests 6000] [--alpha 1.0] [--seed 1]
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import kvtier

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(text):
    text = text.strip().upper()
    if text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def trace(args):
    rng = np.random.default_rng(args.seed)
    lengths = rng.integers(4, 17, size=args.prefixes)
    weights = 1.0 / np.arange(1, args.prefixes + 1) ** args.alpha
    weights /= weights.sum()
    picks = rng.choice(args.prefixes, size=args.requests, p=weights)
    for r, p in enumerate(picks):
        reuse = int(rng.integers(1, lengths[p] + 1))
        own = int(rng.integers(1, 5))
        prefix = [f"p{p}-{i}" for i in range(reuse)]
        suffix = [f"r{r}-{i}" for i in range(own)]
        yield prefix, suffix


def run(args, layout, capacity):
    directory = tempfile.mkdtemp(prefix=f"hit-{layout}-", dir=args.dir)
    try:
        store = kvtier.Store(directory, model="hit-ratio", page_tokens=1, backend="posix",
                             piece_bytes=args.page, capacity_bytes=capacity, file_layout=layout,
                             segment_bytes=args.segment_bytes)
        pool = np.zeros(args.page * 32, dtype=np.uint8)
        asked = found = 0
        start = time.monotonic()
        with store.register_memory(pool):
            pool[:] = np.arange(pool.size, dtype=np.uint64).astype(np.uint8)
            pages = [pool[i * args.page:(i + 1) * args.page] for i in range(32)]
            for prefix, suffix in trace(args):
                hit = store.batch_exists(prefix)
                if hit:
                    r = store.batch_get(prefix[:hit], pages[:hit])
                    hit = r.ok_prefix
                asked += len(prefix)
                found += hit
                missing = prefix[hit:] + suffix
                r = store.batch_put(missing, pages[:len(missing)])
                if not r.all_ok:
                    raise SystemExit(f"{layout}: a put failed: {r.pages}")
        stats = store.stats()
        store.close()
        return {
            "layout": layout, "capacity": capacity, "hit_ratio": found / asked,
            "pages_held": stats["pages"], "evicted_pages": stats["evicted_pages"],
            "used_bytes": stats["used_bytes"], "seconds": time.monotonic() - start,
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--page", type=size, default=65536)
    ap.add_argument("--capacity", type=size, default=64 << 20)
    ap.add_argument("--prefixes", type=int, default=600)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--segment-bytes", type=size, default=0)
    args = ap.parse_args()
    file_page = 4096 + (args.page + 4095) // 4096 * 4096
    key_bytes = 16  # "p123-4": the compact header is 128 bytes and the key, to 64
    record_page = (128 + key_bytes + 63) // 64 * 64 + (args.page + 63) // 64 * 64 + 64
    same_pages = args.capacity * record_page // file_page
    rows = [run(args, "files", args.capacity), run(args, "segments", args.capacity),
            run(args, "segments", same_pages)]
    base = rows[0]["hit_ratio"]
    print(f"trace: {args.prefixes} prefixes of 4-16 pages, Zipf alpha {args.alpha}, "
          f"{args.requests} requests, {args.page} B pages, seed {args.seed}")
    print("layout    capacity   hit ratio  vs files  pages held  evicted  seconds")
    for r in rows:
        print(f"{r['layout']:<9} {r['capacity'] / (1 << 20):7.1f} MiB  {r['hit_ratio']:.4f}"
              f"    {r['hit_ratio'] / base:6.3f}  {r['pages_held']:10d}  {r['evicted_pages']:7d}"
              f"  {r['seconds']:7.1f}")


if __name__ == "__main__":
    main()
