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

PAGE_BYTES = 64 << 10
MAX_BATCH = 64


def page_bytes(key, writer):
    seed = int.from_bytes(hashlib.sha256(f"{key}/{writer}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed).integers(0, 256, size=PAGE_BYTES, dtype=np.uint8)


class HostStore:
    """A store and the registered memory its batches use."""

    def __init__(self, uri, capacity_bytes, model):
        self.store = kvtier.Store(uri, model=model, dtype="uint8", layout="flat", page_tokens=1,
                                  piece_bytes=PAGE_BYTES, capacity_bytes=capacity_bytes)
        self.pool = np.zeros(2 * MAX_BATCH * PAGE_BYTES, dtype=np.uint8)
        self.reg = self.store.register_memory(self.pool)
        self.lock = threading.Lock()  # one batch at a time uses the pool
        self.loop = None

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
            dst = [self.slot(1, i) for i in range(len(keys))]
            for d in dst:
                d[:] = 0
            r = self.store.batch_get(keys, dst)
            out = []
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


def main():
    stores = {}
    loops = {}
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "open":
                stores[req["name"]] = HostStore(req["uri"], req.get("capacity_bytes", 0),
                                                req["model"])
                res = {}
            elif op == "put":
                res = {"codes": stores[req["name"]].put(req["keys"], req["writer"])}
            elif op == "get":
                res = {"got": stores[req["name"]].get(req["keys"], req["writers"])}
            elif op == "exists":
                s = stores[req["name"]].store
                res = {"batch_exists": s.batch_exists(req["keys"]),
                       "exists": [bool(s.exists(k)) for k in req["keys"]]}
            elif op == "stats":
                res = {"stats": {k: v for k, v in stores[req["name"]].store.stats().items()
                                 if isinstance(v, (int, float))}}
            elif op == "clear":
                st = stores[req["name"]].store.clear()
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
                res = {"batches": loops[req["loop"]].batches}
            elif op == "loop_stop":
                lp = loops.pop(req["loop"])
                lp.stop.set()
                lp.thread.join()
                res = {"outcomes": lp.outcomes, "batches": lp.batches,
                       "max_batch_s": lp.max_batch_s, "error": lp.error}
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
