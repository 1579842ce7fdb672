#!/usr/bin/env python3
"""Hit ratio on serving traces: kvtier's layouts through SGLang's own calls, beside an exact LRU
and Belady's optimum holding the same number of pages.

A trace is a list of requests in arrival order, each the chain of prefix block hashes of its
prompt (Mooncake's format, JSON lines {"timestamp", "input_length", "output_length",
"hash_ids"}: one hash per 512-token block, a request's first k hashes equal to another's when
their first k blocks are). Traces come from a file (--trace: Mooncake's published traces are in
kvcache-ai/Mooncake, FAST25-release/traces/; fetch them anywhere outside this repository) or
from the generator here (--generate chat|docs, parameters below, --save to keep it).

Every request is replayed as SGLang's HiCache controller drives its L3 store: batch_exists on
the request's keys (the leading run found), batch_get_v1 of that run into the host pool (the
hits), batch_set_v1 of the rest. One block is one page of --page-kib KiB. For each capacity C
(--capacities, shares of the trace's distinct blocks) every layout runs, once with each
--admission policy (the store's admission=: always takes every page; adaptive declines first
writes while that measures better, "+adapt" in the table), in a store of its own
with capacity = C x (page + 4 KiB), a page file's size (segments keep ~200-byte headers, so
they hold up to 6% more pages than files in the same bytes; --equal-pages gives them about C
pages instead); the same replay runs against
models holding exactly C pages:
  LRU     the least recently used page leaves; a hit is a use, and so is a write of a page
          already held (SGLang writes every page after the first miss; the store keeps it)
  oracle  LRU that takes a page only if it will be asked for again (it knows the future)
  horizon LRU that takes a page only if it will be asked for again within W requests, the
          best W of 25, 50, ..., 3200 and no limit (it knows when): admission alone can do at
          least this well in front of LRU, and more than "oracle" (no limit), which takes
          pages whose next ask comes too late for LRU to keep them
  Belady  the page asked for farthest in the future leaves, and a page asked for later than
          every page held is not kept at all (the offline optimum for independent pages; with
          prefix matching a page after a miss is no hit, so it is a reference, not a bound)
  bound   Belady counting every page it holds, not only the leading run: no policy finds
          more, so it bounds what any admission and eviction can reach
The hit ratio is leading pages found / pages asked for; "copied" is what the store wrote
again while reclaiming (the segment layout's copy-forward: relocated bytes / bytes put), and
"s" the replay's seconds. Pages read back are checked: the first
8 bytes of each page hold its block's hash, written with it; any other value is reported (and
makes the exit status 1).

  PYTHONPATH=build/python /usr/bin/python3 bench/trace_replay.py [--trace FILE | --generate chat]
      [--limit N] [--capacities 0.05,0.1,0.25,0.5] [--layouts files,segments] [--page-kib 64]
      [--dir DIR] [--save FILE] [--no-store] [--segment-lanes N] [--equal-pages]
      [--admission always,adaptive] [--engine sglang|vllm] [--writers N]
  generator: [--requests 4000] [--seed 1] [--prompts 400] [--prompt-blocks 2-24] [--alpha 1.1]
      [--conversation-share 0.6] [--turns 2-8] [--turn-blocks 1-6] [--one-off-share 0.25]
      [--doc-blocks 8-64] [--rate 2.0]
"""

import argparse
import heapq
import json
import os
import shutil
import sys
import tempfile
import time
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))


# ---- traces ----------------------------------------------------------------------------------

def load_trace(path, limit):
    """The requests' hash chains in arrival order (by timestamp; ties in file order)."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            rows.append((j.get("timestamp", 0), len(rows), [int(h) for h in j["hash_ids"]]))
            if limit and len(rows) == limit:
                break
    rows.sort(key=lambda row: row[:2])
    return [hashes for _, _, hashes in rows]


def span(text):
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def generate(args):
    """Mooncake-format requests: shared system prompts chosen by a Zipf law, multi-turn
    conversations that extend their own history, one-off documents, Poisson arrivals."""
    import numpy as np
    rng = np.random.default_rng(args.seed)
    next_hash = [0]

    def fresh(n):
        first = next_hash[0]
        next_hash[0] += n
        return list(range(first, first + n))

    prompt_lo, prompt_hi = span(args.prompt_blocks)
    prompts = [fresh(int(rng.integers(prompt_lo, prompt_hi + 1))) for _ in range(args.prompts)]
    weights = 1.0 / np.arange(1, args.prompts + 1) ** args.alpha
    weights /= weights.sum()
    turn_lo, turn_hi = span(args.turn_blocks)
    turns_lo, turns_hi = span(args.turns)
    doc_lo, doc_hi = span(args.doc_blocks)
    open_conversations = []  # [history, turns left]
    out = []
    t = 0.0
    for _ in range(args.requests):
        t += rng.exponential(1.0 / args.rate)
        roll = rng.random()
        if roll < args.conversation_share and open_conversations and rng.random() < 0.8:
            i = int(rng.integers(len(open_conversations)))
            conv = open_conversations[i]
            conv[0] = conv[0] + fresh(int(rng.integers(turn_lo, turn_hi + 1)))
            conv[1] -= 1
            hashes = conv[0]
            if conv[1] <= 0:
                open_conversations.pop(i)
        elif roll < args.conversation_share:
            prompt = prompts[int(rng.choice(args.prompts, p=weights))]
            hashes = prompt + fresh(int(rng.integers(turn_lo, turn_hi + 1)))
            open_conversations.append([hashes, int(rng.integers(turns_lo, turns_hi + 1)) - 1])
        elif roll < args.conversation_share + args.one_off_share:
            prompt = prompts[int(rng.choice(args.prompts, p=weights))]
            hashes = prompt + fresh(int(rng.integers(doc_lo, doc_hi + 1)))
        else:  # a single question after a shared prompt
            prompt = prompts[int(rng.choice(args.prompts, p=weights))]
            hashes = prompt + fresh(int(rng.integers(turn_lo, turn_hi + 1)))
        out.append({"timestamp": int(t * 1000), "input_length": len(hashes) * 512,
                    "output_length": int(rng.integers(16, 512)), "hash_ids": list(hashes)})
    return out


# ---- models ----------------------------------------------------------------------------------

def leading(hashes, held):
    """How many of a request's blocks are found in order, up to the first that is not (SGLang
    and vLLM use only that run)."""
    k = 0
    while k < len(hashes) and hashes[k] in held:
        k += 1
    return k


def replay_lru(requests, capacity, takes=None):
    """An exact LRU of `capacity` pages. `takes`: takes[r][i] False for a page not to be taken
    when missed (an admission policy in front of the LRU); None takes every page."""
    held = OrderedDict()
    hits = asked = 0
    for r, hashes in enumerate(requests):
        asked += len(hashes)
        hits += leading(hashes, held)
        for i, h in enumerate(hashes):
            if h in held:
                held.move_to_end(h)
            elif capacity > 0 and (takes is None or takes[r][i]):
                if len(held) >= capacity:
                    held.popitem(last=False)
                held[h] = True
    return hits, asked


def next_uses(requests):
    """next_use[r][i]: the next request after r that asks for requests[r][i] (inf: none)."""
    inf = float("inf")
    last = {}
    next_use = [None] * len(requests)
    for r in range(len(requests) - 1, -1, -1):
        next_use[r] = [last.get(h, inf) for h in requests[r]]
        for h in requests[r]:
            last[h] = r
    return next_use


def replay_oracle_admission(requests, capacity):
    """LRU that takes a page only when it will be asked for again: the best any admission
    policy in front of LRU can do (it knows the future), the bound for admission alone."""
    inf = float("inf")
    takes = [[nxt != inf for nxt in row] for row in next_uses(requests)]
    return replay_lru(requests, capacity, takes)


def replay_horizon_admission(requests, capacity):
    """The best of LRUs that take a page only if it is asked for again within W requests:
    what admission alone can reach in front of LRU when it knows when a page comes back."""
    next_use = next_uses(requests)
    best = 0
    for w in (25, 50, 100, 200, 400, 800, 1600, 3200, float("inf")):
        takes = [[nxt != float("inf") and nxt - r <= w for nxt in row]
                 for r, row in enumerate(next_use)]
        best = max(best, replay_lru(requests, capacity, takes)[0])
    return best, sum(len(r) for r in requests)


def every(hashes, held):
    """How many of a request's blocks are held, wherever they lie."""
    return sum(1 for h in hashes if h in held)


def replay_belady(requests, capacity, found=leading):
    """Belady's optimum (evict the page asked for furthest ahead; take nothing asked for later
    than everything held). With found=every it counts every block held, not only the leading
    run: no policy finds more leading blocks than that, the bound for any policy."""
    inf = float("inf")
    next_use = next_uses(requests)
    held = {}   # hash -> its next use
    heap = []   # (-next use, hash), stale entries skipped
    hits = asked = 0
    for r, hashes in enumerate(requests):
        asked += len(hashes)
        hits += found(hashes, held)
        for h, nxt in zip(hashes, next_use[r]):
            if h in held:
                held[h] = nxt
                heapq.heappush(heap, (-nxt, h))
                continue
            if capacity <= 0 or nxt == inf:
                continue
            if len(held) >= capacity:
                while heap and held.get(heap[0][1]) != -heap[0][0]:
                    heapq.heappop(heap)  # stale
                if not heap or -heap[0][0] <= nxt:
                    continue  # everything held is asked for sooner: keep it all
                _, victim = heapq.heappop(heap)
                del held[victim]
            held[h] = nxt
            heapq.heappush(heap, (-nxt, h))
    return hits, asked


# ---- kvtier through SGLang's calls -----------------------------------------------------------

class AdapterReplay:
    """One host pool (page_first_direct, page_size 1: one block per page) as large as the
    longest request, registered with a new adapter for each store."""

    def __init__(self, page_bytes, max_blocks):
        import torch
        from fakes import HostPool
        self.torch = torch
        layers, head_dim = 8, 128
        heads = page_bytes // (2 * layers * head_dim * 2)
        if heads * 2 * layers * head_dim * 2 != page_bytes:
            sys.exit(f"--page-kib: a page must be a multiple of {2 * layers * head_dim * 2} bytes")
        self.pool = HostPool(layout="page_first_direct", backing="torch", tokens=max_blocks,
                             page_size=1, layers=layers, heads=heads, head_dim=head_dim)
        self.pool.fill_random(3)
        # The first 8 bytes of each page's K piece: the block's hash.
        self.stamps = self.pool.kv_buffer[0].reshape(max_blocks, -1)[:, :4].view(torch.int64)
        self.indices = torch.arange(max_blocks, dtype=torch.int64)

    def open(self, directory, layout, capacity_bytes, query=""):
        import kvtier.sglang as adapter
        from sglang_fakes import storage_config
        config = storage_config(layout="page_first_direct", model="trace-replay")
        config.extra_config = {"interface_v1": True, "uri": f"file://{directory}{query}",
                               "file_layout": layout, "capacity": str(capacity_bytes)}
        b = adapter.HiCacheKvtier(config, {})
        b.register_mem_pool_host(self.pool)
        return b

    def replay(self, b, requests):
        hits = asked = wrong = 0
        for hashes in requests:
            n_all = len(hashes)
            asked += n_all
            keys = [f"{h:016x}" for h in hashes]
            n = b.batch_exists(keys)
            found = 0
            if n:
                ok = b.batch_get_v1(keys[:n], self.indices[:n])
                while found < n and ok[found]:
                    found += 1
                got = self.stamps[:found, 0].tolist()
                wrong += sum(1 for g, h in zip(got, hashes) if g != h)
            hits += found
            if found < n_all:
                self.stamps[found:n_all, 0] = self.torch.tensor(hashes[found:], dtype=self.torch.int64)
                b.batch_set_v1(keys[found:], self.indices[found:n_all])
        return hits, asked, wrong


class VllmReplay:
    """vLLM's offloading connector with kvtier as its secondary tier (kvtier.vllm_tier.KvtierTier,
    vLLM's types from python/tests/vllm_fakes), driven as vLLM's tiering manager drives it
    (python/tests/test_vllm_tier.py's Manager): lookup of each chunk in order until the first
    that is not a hit (a RETRY asked again once the tier's background lookups are done), a
    load job of the hits into the CPU tier's rows, a store job of the rest. One block is one
    chunk; the CPU tier's buffer is an mmap, as vLLM's shared offload region is."""

    def __init__(self, page_bytes, max_blocks):
        import mmap
        import numpy
        sys.path.insert(0, os.path.join(HERE, "..", "python", "tests", "vllm_fakes"))
        from vllm.v1.kv_offload import base as vbase
        from vllm.v1.kv_offload import config as vconfig
        from vllm.v1.kv_offload.tiering import base as tbase
        self.np, self.vbase, self.tbase = numpy, vbase, tbase
        self.region = mmap.mmap(-1, max_blocks * page_bytes)
        self.array = numpy.frombuffer(self.region, dtype=numpy.int8).reshape(max_blocks, page_bytes)
        self.stamps = self.array[:, :8].view(numpy.int64)
        self.view = memoryview(self.array)
        layers = tuple(f"model.layers.{i}.self_attn.attn" for i in range(4))
        parallel = vconfig.OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, is_parallelism_agnostic=False)
        config = vconfig.OffloadingConfig(
            groups=(vconfig.OffloadingGroupConfig(tokens_per_block=16, layer_names=layers),),
            worker_kv_bytes_per_block=page_bytes // 4, enable_kv_cache_events=False,
            extra_config={}, engine_id="trace-replay",
            model=vconfig.OffloadingModelConfig("trace-replay", "bfloat16"),
            cache=vconfig.OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=4),
            parallel=parallel)
        self.spec = vbase.OffloadingSpec(config)
        self.next_job = 0

    def open(self, directory, layout, capacity_bytes, query=""):
        from kvtier import vllm_tier
        tier = vllm_tier.KvtierTier(self.spec, self.view, "KvtierTier",
                                    uri=f"file://{directory}{query}", layout=layout,
                                    capacity_bytes=str(capacity_bytes))
        tier.close = tier.shutdown
        return tier

    def _job(self, tier, keys, rows, load):
        job = self.tbase.TransferJob(job_id=self.next_job, keys=keys,
                                     chunk_ids=self.np.array(rows, dtype=self.np.int32),
                                     is_promotion=load, req_context=self.vbase.ReqContext("r"))
        self.next_job += 1
        (tier.submit_load if load else tier.submit_store)(job)
        tier.drain_jobs()
        for result in tier.get_finished_jobs():
            if result.job_id == job.job_id:
                return result
        raise RuntimeError(f"job {job.job_id} was not reported")

    def _lookup(self, tier, key):
        ctx = self.vbase.ReqContext("r")
        while True:
            answer = tier.lookup(key, ctx)
            if answer is not self.vbase.LookupResult.RETRY:
                return answer is self.vbase.LookupResult.HIT
            tier.on_schedule_end(self.vbase.ScheduleEndContext((), ()))
            if not tier.wait_lookups(timeout=60):
                raise RuntimeError("the tier's lookups did not finish in 60 s")

    def replay(self, tier, requests):
        hits = asked = wrong = 0
        for hashes in requests:
            asked += len(hashes)
            keys = [self.vbase.make_offload_key(f"{h:016x}".encode().ljust(32, b"\0"), 0)
                    for h in hashes]
            n = 0
            while n < len(keys) and self._lookup(tier, keys[n]):
                n += 1
            found = 0
            if n:
                result = self._job(tier, keys[:n], range(n), load=True)
                ok = set(keys[:n]) if result.success else set(result.successful_keys or ())
                while found < n and keys[found] in ok:
                    found += 1
                got = self.stamps[:found, 0].tolist()
                wrong += sum(1 for g, h in zip(got, hashes) if g != h)
            hits += found
            if found < len(keys):
                self.stamps[found:len(keys), 0] = hashes[found:]
                self._job(tier, keys[found:], range(found, len(keys)), load=False)
        return hits, asked, wrong


# ---- main ------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace")
    ap.add_argument("--generate", choices=["chat", "docs"])
    ap.add_argument("--limit", type=int, default=0, help="first N requests of --trace")
    ap.add_argument("--save")
    ap.add_argument("--capacities", default="0.05,0.1,0.25,0.5")
    ap.add_argument("--layouts", default="files,segments")
    ap.add_argument("--page-kib", type=int, default=64)
    ap.add_argument("--equal-pages", action="store_true",
                    help="segments get C x (page + 256 B): about C pages (a compact record and "
                         "its summary entry), to compare the policies apart from the space "
                         "segments save")
    ap.add_argument("--writers", type=int, default=1,
                    help="stores sharing each directory and its capacity, each with its own "
                         "index and admission policy, as that many processes or hosts have; "
                         "request i goes through store i %% writers")
    ap.add_argument("--engine", choices=["sglang", "vllm"], default="sglang",
                    help="whose calls replay the trace: SGLang's HiCache (kvtier.sglang) or "
                         "vLLM's offloading connector (kvtier.vllm_tier, a secondary tier)")
    ap.add_argument("--admission", default="always,adaptive",
                    help="admission policies to run each layout with (the store's admission=: "
                         "always takes every page, adaptive declines first writes when that "
                         "measures better)")
    ap.add_argument("--segment-lanes", type=int, default=0,
                    help="segment_lanes of the segment layout (0: the store's default)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--no-store", action="store_true", help="the models only")
    g = ap.add_argument_group("generator")
    g.add_argument("--requests", type=int, default=4000)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--prompts", type=int, default=400)
    g.add_argument("--prompt-blocks", default="2-24")
    g.add_argument("--alpha", type=float, default=1.1)
    g.add_argument("--conversation-share", type=float, default=None)
    g.add_argument("--turns", default="2-8")
    g.add_argument("--turn-blocks", default="1-6")
    g.add_argument("--one-off-share", type=float, default=None)
    g.add_argument("--doc-blocks", default="8-64")
    g.add_argument("--rate", type=float, default=2.0)
    args = ap.parse_args()
    if bool(args.trace) == bool(args.generate):
        sys.exit("give one of --trace FILE and --generate chat|docs")

    if args.trace:
        requests = load_trace(args.trace, args.limit)
        source = f"{args.trace}" + (f" (first {args.limit})" if args.limit else "")
    else:
        presets = {"chat": (0.6, 0.15), "docs": (0.2, 0.6)}[args.generate]
        if args.conversation_share is None:
            args.conversation_share = presets[0]
        if args.one_off_share is None:
            args.one_off_share = presets[1]
        generated = generate(args)
        if args.save:
            with open(args.save, "w") as f:
                for r in generated:
                    f.write(json.dumps(r) + "\n")
        requests = [r["hash_ids"] for r in generated]
        source = (f"generated '{args.generate}': {args.requests} requests, seed {args.seed}, "
                  f"{args.prompts} prompts of {args.prompt_blocks} blocks (Zipf {args.alpha}), "
                  f"conversations {args.conversation_share} ({args.turns} turns of "
                  f"{args.turn_blocks} blocks), one-off documents {args.one_off_share} "
                  f"({args.doc_blocks} blocks), {args.rate} requests/s")
    if not requests:
        sys.exit("the trace has no requests")

    asked = sum(len(r) for r in requests)
    counts = {}
    for r in requests:
        for h in r:
            counts[h] = counts.get(h, 0) + 1
    distinct = len(counts)
    once = sum(1 for c in counts.values() if c == 1)
    print(f"trace: {source}; through {args.engine}'s calls"
          + (f", {args.writers} stores sharing each directory" if args.writers > 1 else ""))
    print(f"  {len(requests)} requests, {asked} blocks asked, {distinct} distinct, "
          f"{once / distinct:.0%} of them asked once; page {args.page_kib} KiB")

    page_bytes = args.page_kib << 10
    admissions = [x for x in args.admission.split(",") if x]
    for a in admissions:
        if a not in ("always", "adaptive"):
            sys.exit(f"--admission: '{a}' (use always or adaptive)")
    layouts = [] if args.no_store else [
        (x, a) for x in args.layouts.split(",") if x for a in admissions]
    engine = VllmReplay if args.engine == "vllm" else AdapterReplay
    side = engine(page_bytes, max(len(r) for r in requests)) if layouts else None
    header = (f"{'C':>8} {'share':>6} {'LRU':>7} {'oracle':>7} {'horizon':>7} {'Belady':>7} "
              f"{'bound':>7}")
    for layout, admission in layouts:
        name = layout if admission == "always" else f"{layout}+{admission[:5]}"
        header += f" {name:>14} {'/LRU':>5} {'copied':>6} {'s':>6}"
    print(header)
    failed = False
    for share in (float(x) for x in args.capacities.split(",")):
        c = max(1, int(distinct * share))
        lru, _ = replay_lru(requests, c)
        oracle, _ = replay_oracle_admission(requests, c)
        horizon, _ = replay_horizon_admission(requests, c)
        opt, _ = replay_belady(requests, c)
        bound, _ = replay_belady(requests, c, found=every)
        row = (f"{c:>8} {share:>6.0%} {lru / asked:7.4f} {oracle / asked:7.4f} "
               f"{horizon / asked:7.4f} {opt / asked:7.4f} {bound / asked:7.4f}")
        for layout, admission in layouts:
            directory = tempfile.mkdtemp(prefix=f"trace-{layout}-", dir=args.dir)
            try:
                params = [f"admission={admission}"]
                if args.segment_lanes and layout == "segments":
                    params.append(f"segment_lanes={args.segment_lanes}")
                per_page = page_bytes + (256 if layout == "segments" and args.equal_pages else 4096)
                stores = [side.open(directory, layout, c * per_page, "?" + "&".join(params))
                          for _ in range(args.writers)]
                t0 = time.perf_counter()
                if len(stores) == 1:
                    hits, _, wrong = side.replay(stores[0], requests)
                else:  # request i through store i % writers
                    hits = wrong = 0
                    for i, request in enumerate(requests):
                        h, _, w = side.replay(stores[i % len(stores)], [request])
                        hits += h
                        wrong += w
                seconds = time.perf_counter() - t0
                relocated = put = 0
                for b in stores:
                    st = b.counters()["store"]
                    relocated += st["relocated_bytes"]
                    put += st["put_bytes"]
                    b.close()
                copied = relocated / max(1, put)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            if wrong:
                failed = True
                print(f"  {layout} ({admission}): {wrong} pages read back with another "
                      f"block's bytes")
            ratio = hits / lru if lru else float("nan")
            row += f" {hits / asked:14.4f} {ratio:5.2f} {copied:6.1%} {seconds:6.1f}"
        print(row, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
