"""kvtier as a secondary tier of vLLM's KV offloading connector (TieringOffloadingSpec).

Start vLLM with

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 10737418240, "block_size": 64,
        "secondary_tiers": [{"type": "KvtierTier", "module_path": "kvtier.vllm_tier",
                             "root": "/mnt/nvme/kv", "capacity_bytes": "1TiB"}]}}'

vLLM keeps chunks in its CPU tier (a shared memory region, one row per chunk holding every
worker's pages); this tier gets every chunk vLLM stores there and is asked for a chunk when the
CPU tier misses it. Options (the keys of the tier's entry besides type and module_path):

    root            a directory (or several, comma-separated); or
    uri             any kvtier location: file:///a,/b?layout=segments, s3://bucket/prefix?...
    capacity_bytes  most bytes the tier may take on storage ("1TiB", 500000000000), as du
                    counts them: chunks and what is kept beside them (about 1 MiB and 0.35%);
                    least recently used chunks are evicted; shared by every process on the
                    location, kept across restarts (FILE locations)
    admission       adaptive | always (default adaptive): with capacity_bytes, whether a full
                    tier may decline a chunk's first store when its measurements of vLLM's
                    lookups say that keeps more hits (a miss later, as an evicted chunk)
    deadline_ms     longest a load or store waits for storage (default 10000): later chunks
                    fail, and a mount that stopped answering is skipped until it answers
    layout          files | segments | auto (default auto: segments for chunks below 4 MiB)
    direct_io       auto | on | off (default auto: rows move by direct I/O where the
                    filesystem takes it and they are aligned, through the page cache where not)
    salt            deployments with different salts never share chunks
    fsync           true: a chunk is durable before its store job reports success
    lookup_retry_ms how long a chunk the index does not know may stay RETRY while storage is
                    asked in the background (default 2000); MISS after that

An unknown or malformed option fails engine start with a message that names it.

What it does with each call (all on vLLM's scheduler thread; none waits for I/O but
drain_jobs and shutdown):

    lookup          HIT or MISS from kvtier's in-memory index; a key the index does not know
                    is RETRY while one background check asks storage (another process may
                    have stored it), at most lookup_retry_ms
    submit_store    the chunks the tier does not hold go to kvtier's async API as one batch,
                    straight from vLLM's rows (registered once, no copy); the rest are skipped
    submit_load     one batch into the rows; get_finished_jobs reports the chunks that loaded
                    (successful_keys) when some did not: a damaged, foreign or missing chunk is
                    never bytes, only a failed key
    drain_jobs      waits for every job in flight (never abandons a copy halfway)
    take_events     when vLLM's KV events are on: the chunks stored and, with a capacity, the
                    chunks kvtier evicted (removed=True) among them

The namespace comes from vLLM's description of the cache (model, dtype, tokens per hash,
blocks per chunk, KV groups and their layers, parallel sizes, layout fields where vLLM has
them, the row size): another model, dtype, TP size or layout is another namespace, so a miss,
never another layout's bytes. The KV-group index stays in the key.

Importing this module needs neither vLLM nor torch; the contract it follows (with the vLLM
files and commits it was read from) is docs/vllm.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional

import kvtier
from kvtier import _options, _vllm_api
from kvtier._engine import Counters, Registrations, address_size, outcomes, prometheus
from kvtier._vllm_api import (_API_PROBLEM, LookupResult, Medium, RequestOffloadingContext, _Base,
                              _vbase)
from kvtier._vllm_metrics import _COUNTERS, _GAUGES, _METRIC_PREFIX, _stats_class

logger = logging.getLogger(__name__)

_OPTIONS = ("root", "uri", "capacity_bytes", "deadline_ms", "layout", "direct_io", "salt",
            "fsync", "lookup_retry_ms", "admission", "key_file", "tenant")
# The store's options, by the names vLLM users give them.
_SETTINGS = {"uri": "uri", "file_layout": "layout", "direct_io": "direct_io", "salt": "salt",
             "fsync": "fsync", "capacity_bytes": "capacity_bytes", "deadline_ms": "deadline_ms",
             "admission": "admission", "key_file": "key_file", "tenant": "tenant"}

# Evicted pages kvtier keeps for take_events between two steps (16 bytes each).
_EVICTIONS_PENDING = 1 << 20


def _key(offload_key: bytes) -> str:
    """vLLM's OffloadKey (block hash + 4-byte KV-group index) as a kvtier key."""
    return bytes(offload_key).hex()


def _geometry(spec: Any, row_bytes: int) -> Dict[str, Any]:
    """What makes chunks interchangeable, from vLLM's description of the cache; fields that
    only newer vLLM has are read when present."""
    config = getattr(spec, "config", None)
    cache = getattr(config, "cache", None)
    parallel = getattr(config, "parallel", None)
    agnostic = bool(getattr(parallel, "is_parallelism_agnostic", False))

    def size(name: str) -> int:
        return 1 if agnostic else int(getattr(parallel, name, 1) or 1)

    groups = [{"tokens_per_block": int(getattr(g, "tokens_per_block", 0)),
               "layer_names": list(getattr(g, "layer_names", ()))}
              for g in getattr(config, "groups", ())]
    geometry = {
        "inference_engine": "vllm",
        "tokens_per_hash": int(getattr(cache, "tokens_per_hash", 0) or
                               getattr(spec, "tokens_per_hash", 0) or 0),
        "blocks_per_chunk": int(getattr(cache, "blocks_per_chunk", 0) or
                                getattr(spec, "blocks_per_chunk", 0) or 0),
        "kv_cache_groups": groups,
        "tp_size": size("tp_size"), "pp_size": size("pp_size"),
        "pcp_size": size("pcp_size"), "dcp_size": size("dcp_size"),
        "parallel_agnostic": agnostic,
        "worker_kv_bytes_per_block": int(getattr(config, "worker_kv_bytes_per_block", 0) or 0),
        "row_bytes": row_bytes,
    }
    for name in ("replicated_layout", "canonical_layout", "kv_cache_layout"):
        value = getattr(config, name, None)
        if value is None:
            value = getattr(spec, name, None)
        if value not in (None, False):
            geometry[name] = value if isinstance(value, (bool, int, str)) else str(value)
    storage_format = getattr(spec, "storage_format", None)
    if storage_format is not None:
        geometry["storage_format"] = str(storage_format)
    return geometry


@dataclass
class _Job:
    job_id: int
    load: bool
    keys: list            # vLLM's keys, in the job's order
    names: List[str]      # their kvtier keys
    ticket: Any           # a kvtier Ticket, or None when there was nothing to move
    sent: List[int]       # indexes (into keys) the ticket moves
    held: List[int]       # store: indexes the tier already held (skipped, successful)
    started: float
    row_bytes: int


class KvtierTier(_Base):  # type: ignore[misc,valid-type]
    """vLLM secondary tier on kvtier (see the module documentation)."""

    medium = Medium.STORAGE

    def __new__(cls, *args: Any, **kwargs: Any) -> "KvtierTier":
        if _API_PROBLEM:
            raise RuntimeError(_API_PROBLEM)
        return super().__new__(cls)

    def __init__(self, offloading_spec: Any, primary_kv_view: Any,
                 tier_type: str = "KvtierTier", backpressure_detector: Any = None,
                 primary_pinning: Any = None, **options: Any) -> None:
        # backpressure_detector and primary_pinning are the framework's (newer factories pass
        # them); the rest are this tier's options.
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ValueError(
                f"KvtierTier: unknown option(s) {', '.join(unknown)}; known: "
                f"{', '.join(_OPTIONS)}")
        view = primary_kv_view if isinstance(primary_kv_view, memoryview) else \
            memoryview(primary_kv_view)
        if _Base is not object:
            kwargs = {}
            if backpressure_detector is not None:
                kwargs["backpressure_detector"] = backpressure_detector
            super().__init__(offloading_spec, view, tier_type, **kwargs)
        else:
            self.tier_type = tier_type
            self.locality = None
        if view.strides is None or view.ndim != 2 or not view.c_contiguous:
            raise ValueError("KvtierTier: the CPU tier's buffer must be a contiguous 2-D view "
                             "(one row per chunk)")
        self._view = view
        self._rows = view.shape[0]
        self._row_bytes = view.strides[0]
        self._spec = offloading_spec

        location = [k for k in ("root", "uri") if options.get(k)]
        if len(location) != 1:
            raise ValueError("KvtierTier: give exactly one of root (a directory, or several "
                             "comma-separated) and uri (any kvtier location)")
        try:
            settings = _options.read_settings(
                {**options, "uri": options.get("uri") or options["root"]}, _SETTINGS,
                defaults={"direct_io": "auto"})
        except kvtier.InvalidArgumentError as exc:
            raise ValueError(f"KvtierTier: {exc}") from None
        retry = options.get("lookup_retry_ms", 2000)
        try:
            self._retry_s = float(retry) / 1000.0
        except (TypeError, ValueError):
            raise ValueError(f"KvtierTier: lookup_retry_ms '{retry}' is not a number") from None

        config = getattr(offloading_spec, "config", None)
        model = getattr(config, "model", None)
        self._geometry = _geometry(offloading_spec, self._row_bytes)
        self._store = settings.open(
            model=str(getattr(model, "name", "") or ""),
            dtype=str(getattr(model, "dtype", "") or ""), layout="vllm_chunk_rows",
            page_tokens=max(1, self._geometry["tokens_per_hash"]), piece_bytes=self._row_bytes,
            pieces=1, tp=(0, self._geometry["tp_size"]), pp=(0, self._geometry["pp_size"]),
            geometry=self._geometry)
        self._registrations = Registrations()
        try:
            self._registrations.add([self._store], view)
            self._base = address_size(view)[0]
        except BaseException:
            self._registrations.release()
            self._store.close()
            raise
        events = getattr(offloading_spec, "kv_events_config", None)
        self._events_on = bool(getattr(events, "enable_kv_cache_events", False))
        self._events: List[Any] = []
        # With events and a capacity: the chunks reported stored, by the hash kvtier names an
        # evicted page with, so that their eviction is reported too.
        self._stored: Optional[Dict[str, Any]] = None
        if self._events_on and settings.capacity_bytes:
            self._stored = {}
            self._store.watch_evictions(_EVICTIONS_PENDING)
        self._jobs: Dict[int, _Job] = {}
        self._finished: List[Any] = []
        self._counters = Counters(
            ("lookups", "lookup_hits", "lookup_retries", "stores", "store_chunks",
             "store_skipped", "store_failed", "store_bytes", "store_time", "loads",
             "load_chunks", "load_missing", "load_faults", "load_bytes", "load_time"), logger)
        self._reported: Dict[str, Any] = {}  # the counters at the previous get_stats
        # Lookups the index could not answer: asked in the background, one batch per step.
        self._lookup_lock = threading.Lock()
        self._lookup_cv = threading.Condition(self._lookup_lock)
        self._asking: Dict[str, float] = {}      # key -> when first asked (RETRY until known)
        self._queued: deque = deque()            # keys for the next background batch
        self._absent: Dict[str, float] = {}      # key -> when storage said absent
        self._closed = False
        self._lookup_thread = threading.Thread(target=self._lookup_loop,
                                               name="kvtier-vllm-lookup", daemon=True)
        self._lookup_thread.start()
        logger.info("kvtier tier: %s, rows of %d B, namespace %s (%s)", settings.uri,
                    self._row_bytes,
                    self._store.namespace, self._store.stats().get("layout", ""))

    # ---- what vLLM calls ---------------------------------------------------------------

    def lookup(self, key: Any, req_context: Any) -> Any:
        name = _key(key)
        self._counters.add(lookups=1)
        now = time.monotonic()
        with self._lookup_lock:
            # Absent when storage was last asked, or a load of it failed: a miss for a while.
            absent = self._absent.get(name)
            if absent is not None:
                if now - absent < self._retry_s:
                    return LookupResult.MISS
                del self._absent[name]
            again = name in self._asking  # asked on an earlier step, still RETRY
        # A lookup the store's admission policy learns from, once per time vLLM asks.
        if self._store.indexed([name], lookup=not again)[0]:
            self._counters.add(lookup_hits=1)
            return LookupResult.HIT
        with self._lookup_lock:
            first = self._asking.get(name)
            if first is None:
                self._asking[name] = now
                self._queued.append(name)
                if len(self._queued) == 1:
                    self._lookup_cv.notify_all()  # keys asked meanwhile make the next batch
            elif now - first >= self._retry_s:
                # Storage has not answered in time: a miss now; asked again later.
                return LookupResult.MISS
        self._counters.add(lookup_retries=1)
        return LookupResult.RETRY

    def on_schedule_end(self, context: Any) -> None:
        with self._lookup_lock:
            if self._queued:
                self._lookup_cv.notify_all()

    def submit_store(self, job_metadata: Any) -> None:
        keys = list(job_metadata.keys)
        rows = self._chunk_ids(job_metadata)
        names = [_key(k) for k in keys]
        held = self._store.indexed(names) if names else []
        sent = [i for i in range(len(keys)) if not held[i]]
        self._counters.add(stores=1, store_skipped=len(keys) - len(sent))
        self._submit(job_metadata.job_id, False, keys, names, rows, sent)

    def submit_load(self, job_metadata: Any) -> None:
        keys = list(job_metadata.keys)
        rows = self._chunk_ids(job_metadata)
        names = [_key(k) for k in keys]
        self._counters.add(loads=1)
        self._submit(job_metadata.job_id, True, keys, names, rows, list(range(len(keys))))

    def get_finished_jobs(self) -> Iterable[Any]:
        finished, self._finished = self._finished, []
        for job_id in [j for j, job in self._jobs.items() if job.ticket is None or
                       job.ticket.done()]:
            finished.append(self._finish(self._jobs.pop(job_id)))
        return finished

    def on_new_request(self, req_context: Any) -> Any:
        return RequestOffloadingContext()

    def drain_jobs(self) -> None:
        for job in list(self._jobs.values()):
            if job.ticket is not None:
                job.ticket.wait()

    def has_pending_work(self) -> bool:
        with self._lookup_lock:
            asking = bool(self._asking)
        return bool(self._jobs) or bool(self._finished) or asking

    def take_events(self) -> Iterable[Any]:
        if self._stored is not None:
            self._take_evictions()
        events, self._events = self._events, []
        return events

    def touch(self, keys: Any, req_context: Any) -> None:
        return

    def on_request_finished(self, req_context: Any) -> None:
        return

    def serve_external_requests(self, parent: Any) -> None:
        return

    @classmethod
    def build_metric_definitions(cls, extra_config: Any) -> dict:
        """The metrics get_stats reports, in vLLM's terms; {} where this vLLM has no metric
        metadata (get_stats then reports nothing)."""
        counter = getattr(_vbase, "OffloadingCounterMetadata", None)
        gauge = getattr(_vbase, "OffloadingGaugeMetadata", None)
        if counter is None or gauge is None or _stats_class() is None:
            return {}
        return {**{_METRIC_PREFIX + k: counter(documentation=v) for k, v in _COUNTERS.items()},
                **{_METRIC_PREFIX + k: gauge(documentation=v) for k, v in _GAUGES.items()}}

    def get_stats(self) -> Any:
        """vLLM's OffloadingConnectorStats: the counters since the previous call (those that
        moved) and the gauges now; None where this vLLM has no such class."""
        cls = _stats_class()
        if cls is None or self._closed:
            return None
        try:
            store = self._store.stats()
            now = self._counters.snapshot()
            now.update(evicted_chunks=store["evicted_pages"],
                       evicted_bytes=store["evicted_bytes"],
                       deadline_misses=store["deadline_misses"])
            stats = cls()
            for name in _COUNTERS:
                delta = now.get(name, 0) - self._reported.get(name, 0)
                if delta:
                    stats.increase_counter(_METRIC_PREFIX + name, delta)
            self._reported = now
            capacity = store["capacity_bytes"]
            held = store["used_bytes"] + store["metadata_bytes"] if capacity else store["bytes"]
            gauges = {"cache_bytes": held, "cache_chunks": store["pages"],
                      "capacity_bytes": capacity, "metadata_bytes": store["metadata_bytes"],
                      "jobs_in_flight": len(self._jobs),
                      "locations_unhealthy": store["locations_unhealthy"]}
            for name, value in gauges.items():
                stats.set_gauge(_METRIC_PREFIX + name, value)
            return stats
        except Exception as exc:  # noqa: BLE001 - never raise into the scheduler
            self._counters.log("get-stats", "get_stats failed: %s: %s", type(exc).__name__, exc)
            return None

    def shutdown(self) -> None:
        if self._closed:
            return
        self.drain_jobs()
        with self._lookup_lock:
            self._closed = True
            self._lookup_cv.notify_all()
        self._lookup_thread.join()
        self._registrations.release()
        self._store.close()

    # ---- kvtier's own ------------------------------------------------------------------

    def counters(self) -> Dict[str, Any]:
        """This tier's counts and its store's statistics."""
        return {**self._counters.snapshot(), "jobs_in_flight": len(self._jobs),
                "store": self._store.stats()}

    def prometheus(self) -> str:
        """kvtier's metrics of the tier's store as Prometheus text."""
        return prometheus([(self._store, [("tier", str(self.tier_type))])])

    @property
    def namespace(self) -> str:
        return self._store.namespace

    def wait_lookups(self, timeout: Optional[float] = None) -> bool:
        """Blocks until no lookup is being asked of storage in the background (tools and
        tests; vLLM never calls it): True, or False when `timeout` seconds passed first."""
        with self._lookup_cv:
            return self._lookup_cv.wait_for(lambda: not self._asking, timeout)

    # ---- internals ---------------------------------------------------------------------

    def _chunk_ids(self, job: Any) -> List[int]:
        ids = getattr(job, "chunk_ids", None)
        if ids is None:
            ids = getattr(job, "block_ids")  # vLLM before the rename (#52615)
        rows = [int(c) for c in ids]
        if len(rows) != len(job.keys):
            raise ValueError(f"KvtierTier: job {job.job_id} has {len(job.keys)} keys and "
                             f"{len(rows)} chunk ids")
        return rows

    def _submit(self, job_id: int, load: bool, keys: list, names: List[str], rows: List[int],
                sent: List[int]) -> None:
        if job_id in self._jobs:
            raise ValueError(f"KvtierTier: job {job_id} was submitted twice")
        held = [] if load else sorted(set(range(len(keys))) - set(sent))
        bad = [i for i in sent if not 0 <= rows[i] < self._rows]
        if bad:
            logger.warning("kvtier tier: job %d names chunk %d of %d rows", job_id,
                           rows[bad[0]], self._rows)
            sent = [i for i in sent if 0 <= rows[i] < self._rows]
        ticket = None
        if sent:
            ptrs = [self._base + rows[i] * self._row_bytes for i in sent]
            sizes = [self._row_bytes] * len(sent)
            batch = [names[i] for i in sent]
            try:
                ticket = (self._store.submit_get_pieces(batch, ptrs, sizes) if load else
                          self._store.submit_put_pieces(batch, ptrs, sizes))
            except Exception as exc:  # noqa: BLE001 - the job fails; vLLM keeps serving
                logger.warning("kvtier tier: job %d not submitted: %s", job_id, exc)
                sent = []
        self._jobs[job_id] = _Job(job_id, load, keys, names, ticket, sent, held,
                                  time.monotonic(), self._row_bytes)

    def _finish(self, job: _Job) -> Any:
        ok = [False] * len(job.keys)
        for i in job.held:
            ok[i] = True
        faults: List[Any] = []
        if job.ticket is not None:
            result = job.ticket.result()
            # A job done whole (the common case) costs no Status object per chunk.
            done, faults = ([True] * len(job.sent), []) if result.all_ok else \
                outcomes(result.pages, write=not job.load)
            for i, there in zip(job.sent, done):
                ok[i] = there
        moved = [i for i in job.sent if ok[i]]
        seconds = time.monotonic() - job.started
        success = all(ok)
        if faults:
            self._counters.log("load-fault" if job.load else "store-fault",
                               "%d of %d chunks of job %d failed (%s): %s", len(faults),
                               len(job.keys), job.job_id, "load" if job.load else "store",
                               faults[0])
        if job.load:
            # A damaged, foreign or absent chunk is a miss; anything else is a fault.
            self._counters.add(load_chunks=len(moved), load_faults=len(faults),
                               load_bytes=len(moved) * job.row_bytes, load_time=seconds,
                               load_missing=len(job.keys) - len(moved) - len(faults))
            if not success:
                # A key that failed is a miss for a while, not HIT again at once (a promotion
                # retried every step would never end).
                now = time.monotonic()
                with self._lookup_lock:
                    for i in range(len(job.keys)):
                        if not ok[i]:
                            self._absent[job.names[i]] = now
            return _vllm_api.job_result(
                job.job_id, success,
                successful_keys=None if success else
                [job.keys[i] for i in range(len(job.keys)) if ok[i]],
                transfer_time=seconds, transfer_bytes=len(moved) * job.row_bytes)
        self._counters.add(store_chunks=len(moved), store_bytes=len(moved) * job.row_bytes,
                           store_time=seconds,
                           store_failed=len(job.keys) - len(moved) - len(job.held))
        if moved:
            # Stored now: a miss remembered from before (storage said absent) no longer holds.
            with self._lookup_lock:
                for i in moved:
                    self._absent.pop(job.names[i], None)
        if self._events_on and moved:
            stored = [job.keys[i] for i in moved]
            if self._stored is not None:
                names = [job.names[i] for i in moved]
                self._stored.update(zip(kvtier.Store.key_hashes(names), stored))
            self._events.append(_vllm_api.offloading_event(
                keys=stored, medium=Medium.STORAGE, removed=False, ownership=self.tier_type))
        return _vllm_api.job_result(job.job_id, success, transfer_time=seconds,
                                    transfer_bytes=len(moved) * job.row_bytes)

    def _take_evictions(self) -> None:
        """Removal events for the chunks kvtier evicted that this tier reported stored."""
        hashes, dropped = self._store.take_evicted()
        stored = self._stored
        removed = [key for key in (stored.pop(h, None) for h in hashes) if key is not None]
        if dropped:
            # More evictions than the journal keeps: the index says which of the chunks
            # reported stored are gone.
            items = list(stored.items())
            there = self._store.indexed([_key(key) for _, key in items])
            for (h, key), held in zip(items, there):
                if not held:
                    removed.append(stored.pop(h))
        if removed:
            self._events.append(_vllm_api.offloading_event(
                keys=removed, medium=Medium.STORAGE, removed=True, ownership=self.tier_type))

    def _lookup_loop(self) -> None:
        while True:
            with self._lookup_lock:
                while not self._queued and not self._closed:
                    self._lookup_cv.wait()
                if self._closed:
                    self._asking.clear()
                    self._lookup_cv.notify_all()
                if self._closed:
                    return
                batch = list(self._queued)
                self._queued.clear()
            found = {}
            for name in batch:
                try:
                    # Indexes what it finds; lookup() told the store it was asked.
                    found[name] = self._store.exists(name, lookup=False)
                except Exception:  # noqa: BLE001 - unknown: asked again after the retry bound
                    found[name] = False
            now = time.monotonic()
            with self._lookup_lock:
                for name, there in found.items():
                    self._asking.pop(name, None)
                    if not there:
                        self._absent[name] = now
                self._lookup_cv.notify_all()
