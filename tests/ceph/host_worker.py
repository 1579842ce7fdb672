"""One simulated host's kvtier process for the multi-host tests (tests/ceph/test_multihost.py).

Started inside a host's network namespace (tests/ceph/cluster.sh exec), it reads one JSON
request a line on stdin and answers each with one JSON line on stdout. It keeps its stores open
between requests, so a test can ask a store that was open before another host wrote.

Pages are 64 KiB of bytes derived from (key, writer): a reader can tell which writer's page it
read, or that the bytes are nobody's.
"""

import hashlib
import json
import os
import sys
import threading
import time
import traceback

import numpy as np

import kvtier

# The SGLang adapter, driven with the fakes of SGLang's config and host pool of python/tests.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "tests"))

PAGE_BYTES = 64 << 10
MAX_BATCH = 64


def page_bytes(key, writer):
    seed = int.from_bytes(hashlib.sha256(f"{key}/{writer}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed).integers(0, 256, size=PAGE_BYTES, dtype=np.uint8)


class HostStore:
    """A store and the registered memory its batches use."""

    def __init__(self, uri, capacity_bytes, model, segment_bytes=0, key_file="", tenant=""):
        self.store = kvtier.Store(uri, model=model, dtype="uint8", layout="flat", page_tokens=1,
                                  piece_bytes=PAGE_BYTES, capacity_bytes=capacity_bytes,
                                  segment_bytes=segment_bytes, key_file=key_file, tenant=tenant)
        self.pool = np.zeros(2 * MAX_BATCH * PAGE_BYTES, dtype=np.uint8)
        self.reg = self.store.register_memory(self.pool)
        self.lock = threading.Lock()  # one batch at a time uses the pool
        self.loop = None
        # Read slots of pages the last get did not read: zeros it left there, which nothing
        # may write after the call returned (a late completion into the caller's memory).
        self.unread = []

    def slot(self, half, i):
        off = (half * MAX_BATCH + i) * PAGE_BYTES
        return self.pool[off:off + PAGE_BYTES]

    def put(self, keys, writer):
        assert len(keys) <= MAX_BATCH
        with self.lock:
            pages = []
            for i, k in enumerate(keys):
                s = self.slot(0, i)
                s[:] = page_bytes(k, writer)
                pages.append(s)
            r = self.store.batch_put(keys, pages)
            return [p.code for p in r.pages]

    def get(self, keys, writers):
        """Per key: "MISS", "CODE:<code>", "BAD" (bytes of no writer) or the writer's name."""
        assert len(keys) <= MAX_BATCH
        with self.lock:
            late = sum(1 for i in self.unread if self.slot(1, i).any())
            dst = [self.slot(1, i) for i in range(len(keys))]
            for d in dst:
                d[:] = 0
            r = self.store.batch_get(keys, dst)
            self.unread = [i for i, st in enumerate(r.pages) if st.code != "OK"]
            out = ["LATE"] * late
            for k, d, st in zip(keys, dst, r.pages):
                if st.code == "NOT_FOUND":
                    out.append("MISS")
                elif st.code != "OK":
                    out.append("CODE:" + st.code)
                else:
                    who = [w for w in writers if np.array_equal(d, page_bytes(k, w))]
                    out.append(who[0] if who else "BAD")
            return out


class LoopState:
    """A loop of batches run on a thread until stopped; counts outcomes and latencies."""

    def __init__(self, hs, req):
        self.hs = hs
        self.req = req
        self.stop = threading.Event()
        self.outcomes = {}
        self.batches = 0
        self.max_batch_s = 0.0
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        keys, kind = self.req["keys"], self.req["kind"]
        batch = self.req.get("batch", 16)
        writers = self.req.get("writers", [])
        i = 0
        try:
            while not self.stop.is_set():
                ks = [keys[(i + j) % len(keys)] for j in range(batch)]
                i += batch
                t = time.monotonic()
                if kind == "get":
                    res = self.hs.get(ks, writers)
                elif kind == "put":
                    res = self.hs.put(ks, self.req["writer"])
                else:  # exists: the answer itself is racy; that it answers is what counts
                    self.hs.store.batch_exists(ks)
                    res = ["ANSWERED"]
                self.max_batch_s = max(self.max_batch_s, time.monotonic() - t)
                self.batches += 1
                for o in res:
                    self.outcomes[o] = self.outcomes.get(o, 0) + 1
        except Exception:  # reported by loop_stop
            self.error = traceback.format_exc()


class SglangHost:
    """kvtier.sglang.HiCacheKvtier as one SGLang server uses it: a host pool of 16 pages,
    registered once; pages move by the v1 calls."""

    def __init__(self, uri, seed, options=None):
        from fakes import HostPool, StorageConfig, host_indices
        from kvtier.sglang import HiCacheKvtier

        self.host_indices = host_indices
        self.pool = HostPool(tokens=64, page_size=4)
        self.pool.fill_random(seed=seed)
        self.ref = HostPool(tokens=64, page_size=4)  # what every writer's pages hold
        self.ref.fill_random(seed=seed)
        self.ps = self.pool.page_size
        self.adapter = HiCacheKvtier(StorageConfig(), {"uri": uri, **(options or {})})
        self.adapter.register_mem_pool_host(self.pool)
        self.loop = None

    def slots(self, pages):
        return self.host_indices(pages, self.ps)

    def set(self, keys):
        return self.adapter.batch_set_v1(keys, self.slots(range(len(keys))))

    def read_round(self, keys, counts):
        """One prefix lookup and read as SGLang's controller does it: batch_exists, then
        batch_get_v1 of that prefix into other slots, each page checked against the bytes
        written for its key."""
        n = self.adapter.batch_exists(keys)
        got = self.adapter.batch_get_v1(keys[:n], self.slots(range(len(keys) - n, len(keys))))
        for i, ok in enumerate(got):
            if not ok:
                counts["miss"] += 1
            elif np.array_equal(self.pool.page_bytes((len(keys) - n + i) * self.ps),
                                self.ref.page_bytes(i * self.ps)):
                counts["hit"] += 1
            else:
                counts["bad"] += 1
        counts["miss"] += len(keys) - len(got)
        counts["rounds"] += 1


class SglangLoop:
    def __init__(self, host, keys):
        self.counts = {"hit": 0, "miss": 0, "bad": 0, "exceptions": 0, "rounds": 0}
        self.stop = threading.Event()
        self.errors = []
        self.thread = threading.Thread(target=self.run, args=(host, keys), daemon=True)
        self.thread.start()

    def run(self, host, keys):
        while not self.stop.is_set():
            try:
                host.read_round(keys, self.counts)
            except Exception:  # what SGLang would see raised
                self.counts["exceptions"] += 1
                self.errors.append(traceback.format_exc())


def main():
    stores = {}
    loops = {}
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "open":
                stores[req["name"]] = HostStore(req["uri"], req.get("capacity_bytes", 0),
                                                req["model"], req.get("segment_bytes", 0),
                                                req.get("key_file", ""), req.get("tenant", ""))
                res = {}
            elif op == "put":
                res = {"codes": stores[req["name"]].put(req["keys"], req["writer"])}
            elif op == "get":
                res = {"got": stores[req["name"]].get(req["keys"], req["writers"])}
            elif op == "exists":
                s = stores[req["name"]].store
                res = {"batch_exists": s.batch_exists(req["keys"]),
                       "exists": [bool(s.exists(k)) for k in req["keys"]]}
            elif op == "wait_health":
                res = {"reached": stores[req["name"]].store.wait_health(
                    answering=req["answering"], timeout_s=req["timeout_s"])}
            elif op == "stats":
                res = {"stats": {k: v for k, v in stores[req["name"]].store.stats().items()
                                 if isinstance(v, (int, float))}}
            elif op == "clear":
                st = stores[req["name"]].store.clear()
                res = {"code": st.code}
            elif op == "capacity_holding":
                res = {"capacity": kvtier.capacity_holding(req["page_bytes"],
                                                           req.get("layout", "files"))}
            elif op == "remove":
                st = stores[req["name"]].store.remove(req["key"])
                res = {"code": st.code}
            elif op == "close":
                hs = stores.pop(req["name"])
                del hs.reg
                hs.store.close()
                res = {}
            elif op == "loop_start":
                loops[req["loop"]] = LoopState(stores[req["name"]], req)
                res = {}
            elif op == "loop_batches":
                lp = loops[req["loop"]]
                res = {"batches": lp.counts["rounds"] if isinstance(lp, SglangLoop)
                       else lp.batches}
            elif op == "loop_stop":
                lp = loops.pop(req["loop"])
                lp.stop.set()
                lp.thread.join()
                res = {"outcomes": lp.outcomes, "batches": lp.batches,
                       "max_batch_s": lp.max_batch_s, "error": lp.error}
            elif op == "sg_open":
                stores[req["name"]] = SglangHost(req["uri"], req["seed"], req.get("options"))
                res = {}
            elif op == "sg_set":
                res = {"stored": stores[req["name"]].set(req["keys"])}
            elif op == "sg_exists":
                res = {"batch_exists": stores[req["name"]].adapter.batch_exists(req["keys"])}
            elif op == "sg_clear":
                res = {"cleared": stores[req["name"]].adapter.clear()}
            elif op == "sg_loop_start":
                loops[req["loop"]] = SglangLoop(stores[req["name"]], req["keys"])
                res = {}
            elif op == "sg_loop_stop":
                lp = loops.pop(req["loop"])
                lp.stop.set()
                lp.thread.join()
                res = {"counts": lp.counts, "errors": lp.errors[:3]}
            elif op == "sg_counters":
                c = stores[req["name"]].adapter.counters()
                res = {"counters": {k: v for k, v in c.items() if isinstance(v, (int, float))}}
            elif op == "pid":
                res = {"pid": os.getpid()}
            else:
                res = {"error": "unknown op " + op}
        except Exception:
            res = {"error": traceback.format_exc()}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
