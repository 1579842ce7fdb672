"""kvtier as SGLang's HiCache L3 storage backend.

Start an SGLang server with

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang", "class_name": "HiCacheKvtier",
        "interface_v1": true, "uri": "file:///var/cache/kvtier"}'

Options (keys of the extra config; the environment variable is the fallback):

    uri           KVTIER_URI        where pages live: a directory, file:///a[,/b][?backend=...],
                                    or mem://name (default file:///tmp/kvtier-hicache)
    backend       KVTIER_BACKEND    auto | uring | posix | s3 (default auto)
    direct_io     KVTIER_DIRECT_IO  off | auto | on (default off)
    file_layout   KVTIER_FILE_LAYOUT  files | segments | auto: a file per page, or pages
                                    appended to large segment files (no file created per
                                    page; FILE stores), or auto: what the namespace already
                                    holds, else segments for pages below 4 MiB (default: the
                                    URI's layout=, else auto; the start-up log line and
                                    counters()["store"]["layout"] say which and why)
    fsync         KVTIER_FSYNC      true: a page is durable before batch_set reports it
    salt          KVTIER_SALT       tenant/deployment salt: different salts never share pages
                                    ("tenant" is accepted as a synonym)
    model_revision                  weights revision, appended to the model name
    capacity      KVTIER_CAPACITY   most bytes this deployment may take on storage ("100GiB"),
                                    as du counts them: pages and what is kept beside them
                                    (about 1 MiB and 0.35%), split evenly between the model's
                                    shards (TP ranks unless MLA, PP stages, CP ranks; a hybrid
                                    model's pools each take as much); least recently used
                                    pages are evicted (FILE stores only)
    min_free      KVTIER_MIN_FREE   bytes to leave free on the filesystem ("20GiB")
    staging_mb                      memory for staged pages, per direction (default 64)
    deadline_ms   KVTIER_DEADLINE_MS  longest a get/set/exists call waits for storage: later
                                    pages are misses, and a location that missed it is
                                    skipped until a probe finds it answering (FILE stores on
                                    network and FUSE filesystems, S3; default 10000; 0: none)
    isolate       KVTIER_ISOLATE    auto | on | off: which FILE locations run their I/O on
                                    kvtier's own threads so that a hung mount cannot hold
                                    SGLang's (default auto: network and FUSE filesystems)
    admission     KVTIER_ADMISSION  adaptive | always: with a capacity, whether a full store
                                    may decline a page's first write when that measures
                                    better (default adaptive; docs/architecture.md)

What SGLang calls, and what each call does here, is written down in docs/sglang.md: the v1
zero-copy KV calls, the v2 calls of hybrid models (one namespace per host pool: KV, Mamba,
SWA, indexer, DeepSeek-V4's pools, draft pools), every host layout SGLang stores, heads split
between deployments of different TP sizes (tp_lcm_size), draft pages through the legacy calls,
and get_stats() answering SGLang's own StorageMetrics.

Pages are shared exactly between servers whose model, revision, dtype, memory layout, page
size, page geometry, TP/PP/CP shard, MLA flag and salt agree; anything else gets its own
namespace. Attention-DP replicas of the same shard compute the same KV and share pages.

The adapter never raises into SGLang's threads once constructed: storage faults and caller
errors become False/None/0 with a counter (counters()) and a rate-limited log line.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import kvtier
from kvtier import _options
from kvtier._engine import Counters, outcomes, prometheus
from kvtier._sglang_hybrid import HybridCalls
from kvtier._sglang_legacy import LegacyCalls
from kvtier._sglang_pool import (  # noqa: F401 - STORAGE_BATCH_SIZE, _Indices: re-exported
    STORAGE_BATCH_SIZE, _DraftPages, _Indices, _name_key, _Pool, _Staging)

try:  # Subclass SGLang's interface when SGLang is importable; work without it.
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _HiCacheStorage
except Exception:  # noqa: BLE001 - any import failure means "no SGLang here"
    _HiCacheStorage = object


_SGLANG_ATTRS: Dict[tuple, Any] = {}


def _sglang_attr(module: str, name: str) -> Any:
    """SGLang's `module.name`, or None where SGLang (or that name) is absent. Looked up once
    per process (a failed import costs a search of sys.path)."""
    key = (module, name)
    if key not in _SGLANG_ATTRS:
        try:
            _SGLANG_ATTRS[key] = getattr(importlib.import_module(module), name, None)
        except Exception:  # noqa: BLE001
            _SGLANG_ATTRS[key] = None
    return _SGLANG_ATTRS[key]


def _sglang_storage_metrics() -> Any:
    """SGLang's StorageMetrics class: its current module first, the older one second."""
    for module in ("sglang.srt.observability.metrics_collector", "sglang.srt.metrics.collector"):
        cls = _sglang_attr(module, "StorageMetrics")
        if cls is not None:
            return cls
    return None

logger = logging.getLogger(__name__)

DEFAULT_URI = "file:///tmp/kvtier-hicache"
# The host layouts SGLang can store; page_first_kv_split (MLA on Ascend) it cannot.
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
# The extra-config keys of the store's options, and their environment variables.
_SETTINGS = {"uri": "uri", "backend": "backend", "direct_io": "direct_io",
             "file_layout": "file_layout", "fsync": "fsync", "salt": "salt",
             "capacity_bytes": "capacity", "min_free_bytes": "min_free",
             "deadline_ms": "deadline_ms", "isolate": "isolate", "admission": "admission",
             "key_file": "key_file", "tenant": "tenant"}
_ENV = {field: "KVTIER_" + key.upper() for field, key in _SETTINGS.items()}


@dataclass
class PoolTransferResult:
    """batch_exists_v2's answer where SGLang's own class is not importable."""

    kv_hit_pages: int
    extra_pool_hit_pages: Dict[Any, int] = field(default_factory=dict)


@dataclass
class KvtierStorageMetrics:
    """kvtier's own view of an interval (storage_metrics()): SGLang's per-interval lists,
    plus the adapter's cumulative counters."""

    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)
    counters: Dict[str, Any] = field(default_factory=dict)


class HiCacheKvtier(LegacyCalls, HybridCalls, _HiCacheStorage):
    """SGLang HiCache storage backend on kvtier (see the module documentation)."""

    def __init__(self, storage_config: Any = None, kwargs: Optional[Dict[str, Any]] = None):
        cfg = storage_config
        options: Dict[str, Any] = {}
        extra = getattr(cfg, "extra_config", None)
        if extra:
            options.update(extra)
        if kwargs:
            options.update(kwargs)
        self._options = options

        # Old servers pass only tp_rank, tp_size, is_mla_model, is_page_first_layout,
        # model_name and extra_config; newer ones add PP/CP/DP, metrics and split heads.
        self.tp_rank = int(getattr(cfg, "tp_rank", 0) or 0)
        self.tp_size = int(getattr(cfg, "tp_size", 1) or 1)
        self.pp_rank = int(getattr(cfg, "pp_rank", 0) or 0)
        self.pp_size = int(getattr(cfg, "pp_size", 1) or 1)
        self.cp_rank = int(getattr(cfg, "attn_cp_rank", 0) or 0)
        self.cp_size = int(getattr(cfg, "attn_cp_size", 1) or 1)
        self.is_mla = bool(getattr(cfg, "is_mla_model", False))
        self.model_name = getattr(cfg, "model_name", None) or ""
        self.enable_metrics = bool(getattr(cfg, "enable_storage_metrics", False))
        # SGLang takes tp_lcm_size out of the extra config and decides should_split_heads
        # (page_head pools of non-MLA models with a larger lcm); older servers leave it in.
        lcm = getattr(cfg, "tp_lcm_size", None) or options.get("tp_lcm_size")
        self.tp_lcm_size = int(lcm) if lcm else None
        self.should_split_heads = bool(getattr(cfg, "should_split_heads", False))
        self.split_factor = 1
        if self.should_split_heads and self.tp_lcm_size and not self.is_mla:
            if self.tp_lcm_size % self.tp_size:
                raise kvtier.InvalidArgumentError(
                    f"tp_lcm_size {self.tp_lcm_size} is not a multiple of tp_size "
                    f"{self.tp_size}")
            self.split_factor = self.tp_lcm_size // self.tp_size

        # Older configs name the location "directory" or "path", and the salt "tenant"
        # (which, with a key file, also names whose keys seal the pages).
        settings = dict(options)
        for alias, key in (("directory", "uri"), ("path", "uri"), ("tenant", "salt")):
            if settings.get(key) is None and settings.get(alias) is not None:
                settings[key] = settings[alias]
        self.settings = _options.read_settings(settings, _SETTINGS, _ENV, {"uri": DEFAULT_URI})
        for name in ("uri", "backend", "direct_io", "file_layout", "fsync", "salt",
                     "capacity_bytes", "min_free_bytes", "deadline_ms", "isolate", "admission"):
            setattr(self, name, getattr(self.settings, name))
        revision = options.get("model_revision")
        if revision:
            self.model_name = f"{self.model_name}@{revision}"
        self.staging_bytes = int(float(options.get("staging_mb", 64)) * (1 << 20))

        self._lock = threading.Lock()
        self._kv: Optional[_Pool] = None
        self._pools: Dict[str, _Pool] = {}
        self._drafts: Dict[int, _DraftPages] = {}
        self._legacy: Optional[_Staging] = None  # legacy KV pages outside the pool
        self._store: Optional[kvtier.Store] = None  # the KV pool's (first) store
        self._closed = False
        self.mem_pool_host = None
        self.layout = None
        self.page_size = 0
        self.page_bytes = 0
        self._counters = Counters(
            ("get_pages", "get_hits", "get_misses", "get_faults", "get_not_read", "set_pages",
             "set_ok", "set_faults", "set_present", "exists_calls", "errors", "skipped_writes",
             "unknown_pool", "draft_pages"), logger)
        self._log = self._counters.log
        self._count = self._counters.add
        self._interval = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [],
                          "backup_bandwidth": []}

    # ---- setup -------------------------------------------------------------------------

    def open_store(self, *, dtype: str, layout: str, page_tokens: int, piece_bytes: int,
                   pieces: int, tp: tuple, mla: bool, page_bytes: int = 0) -> "kvtier.Store":
        """A store of this deployment (model, shard, salt, options) for one page geometry
        (`page_bytes`: the page's size where its pieces differ, for file_layout auto)."""
        # `capacity` is the deployment's: every shard of the model (a TP rank's heads, unless
        # replicated; a PP stage; a CP rank) is a namespace with a ledger of its own, and each
        # takes its even share.
        shares = (1 if mla else tp[1]) * self.pp_size * self.cp_size
        return self.settings.open(
            model=self.model_name, dtype=dtype, layout=layout, page_tokens=page_tokens,
            piece_bytes=piece_bytes, pieces=pieces, tp=tp, pp=(self.pp_rank, self.pp_size),
            cp=(self.cp_rank, self.cp_size), mla=mla, page_bytes=page_bytes, shares=shares)

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Registers the KV host pool (or a pool group's anchor) once and opens its
        namespace. Raises for what cannot be stored (a clear error at startup)."""
        if self._kv is not None or self._closed:
            raise kvtier.InvalidArgumentError("register_mem_pool_host was already called")
        anchor = mem_pool_host
        entry = getattr(mem_pool_host, "anchor_entry", None) if \
            hasattr(mem_pool_host, "entries") else None
        if entry is not None:
            anchor = getattr(entry, "host_pool", anchor)
        pool = _Pool(self, "kv", anchor)
        with self._lock:
            self._kv = pool
            self._pools["kv"] = pool
            self._store = pool.stores[0]
        self.mem_pool_host = mem_pool_host
        self.layout = pool.layout
        self.page_size = pool.page_size
        self.page_bytes = pool.page_bytes
        store = pool.stores[0]
        logger.info("kvtier: %s, KV namespace %s (%s %s, %s pages of %d B%s), %s, layout %s",
                    store.backend, store.namespace_id, self.model_name, pool.layout,
                    "marker" if pool.logical else len(pool.sizes), pool.page_bytes,
                    f", heads split {pool.split} ways" if pool.split > 1 else "",
                    "zero-copy" if pool.zero_copy else "staged", pool.layout_summary())

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Registers one pool of a hybrid model's group (KV, Mamba, SWA, indexer, DeepSeek-V4
        pools, draft pools) in a namespace of its own."""
        name = _name_key(host_pool_name)
        if name == "kv":
            if self._kv is None:
                self.register_mem_pool_host(host_pool)
            return
        with self._lock:
            existing = self._pools.get(name)
        if existing is not None:
            if existing.host is host_pool:
                return
            raise kvtier.InvalidArgumentError(f"pool '{name}' is already registered")
        if self._kv is None:
            raise kvtier.InvalidArgumentError(
                f"pool '{name}' registered before the KV pool (register_mem_pool_host)")
        pool = _Pool(self, name, host_pool)
        with self._lock:
            self._pools[name] = pool
        logger.info("kvtier: pool %s: namespace %s (%s, %d pieces of %s B), %s, layout %s",
                    name, pool.stores[0].namespace_id, pool.layout, len(pool.sizes),
                    "+".join(str(s) for s in pool.sizes),
                    "zero-copy" if pool.zero_copy else "staged", pool.layout_summary())

    def close(self) -> None:
        """Releases every registration and closes every store. Idempotent."""
        with self._lock:
            pools = list(self._pools.values())
            drafts = list(self._drafts.values())
            legacy = self._legacy
            self._pools, self._drafts, self._legacy = {}, {}, None
            self._kv, self._store, self._closed = None, None, True
        if legacy is not None:
            legacy.release()
        for pool in pools:
            pool.close()
        for draft in drafts:
            draft.close()

    # ---- helpers -----------------------------------------------------------------------

    def _ready(self) -> Optional[_Pool]:
        pool = self._kv
        if pool is None:
            self._log("not-ready", "call before register_mem_pool_host or after close: "
                      "answering as a miss")
        return pool

    def _fail(self, what: str, exc: BaseException) -> None:
        self._count(errors=1)
        self._log(what, "%s failed: %s: %s", what, type(exc).__name__, exc)

    def _skip_write(self, pool: Optional[_Pool] = None) -> bool:
        # MLA-style models: every TP rank holds the same KV pages, and SGLang backs them up from
        # TP rank 0 only; a KV write another rank is asked for anyway is answered as rank 0's.
        # Every other pool is written by each rank SGLang asks to (SGLang does not skip them,
        # so neither does the adapter): a page of a shared pool that another rank stored first
        # is skipped as present, and none is reported stored that this rank did not see stored.
        if pool is not None and not pool.is_kv:
            return False
        return self.is_mla and self.tp_rank != 0

    def _tally(self, kind: str, pool: _Pool, statuses: List[Any], seconds: float) -> List[bool]:
        ok, faults = outcomes(statuses, write=kind == "set")
        hits = sum(ok)
        if kind == "get":
            self._count(get_pages=len(ok), get_hits=hits,
                        get_misses=len(ok) - hits - len(faults), get_faults=len(faults))
        else:
            self._count(set_pages=len(ok), set_ok=hits, set_faults=len(faults))
        if faults:
            self._log(f"{kind}-fault", "%d of %d pages of pool %s failed (%s): %s",
                      len(faults), len(ok), pool.name, kind, faults[0])
        if pool.is_kv:
            with self._lock:
                pgs, bw = ("prefetch_pgs", "prefetch_bandwidth") if kind == "get" else \
                    ("backup_pgs", "backup_bandwidth")
                self._interval[pgs].append(hits)
                if seconds > 0 and hits:
                    self._interval[bw].append(hits * pool.page_bytes / seconds / 1e9)
        return ok

    def _set_pages(self, pool: _Pool, keys: List[str], host_indices: Any) -> List[bool]:
        """Writes the pages that are not stored yet; pages already there count as written."""
        keys = list(keys)
        if not keys:
            return []
        indices = pool.indices(keys, host_indices)
        start = time.perf_counter()
        done = pool.rows_io(True, keys, indices, skip=True) if pool.rows is not None else None
        if done is not None:  # one store call: the present run skipped, the rest written
            present, statuses = done
            if present:
                self._count(set_present=present)
            if present == len(keys):
                return [True] * len(keys)
            return [True] * present + self._tally("set", pool, statuses[present:],
                                                  time.perf_counter() - start)
        present = pool.exists_prefix(keys, lookup=False)
        if present:
            self._count(set_present=present)
        if present == len(keys):
            return [True] * len(keys)
        rest = pool.pages(indices, present, len(keys) - present)
        statuses = pool.io(True, keys[present:], rest)
        return [True] * present + self._tally("set", pool, statuses,
                                              time.perf_counter() - start)

    def _get_pages(self, pool: _Pool, keys: List[str], host_indices: Any,
                   confirmed: bool = False) -> List[bool]:
        """Reads the leading run of stored pages; the pages after the first absent one are
        False without any I/O (SGLang uses the leading run only).

        `confirmed`: batch_exists_v2 has just found every one of these pages, so they are
        read without asking the index again. A page removed since then reads as a miss
        (never as other bytes), and the pages after it, read too, are answered False."""
        keys = list(keys)
        if not keys:
            return []
        indices = pool.indices(keys, host_indices)
        start = time.perf_counter()
        if confirmed:
            ok = self._tally("get", pool, pool.io(False, keys, indices),
                             time.perf_counter() - start)
            if all(ok):
                return ok
            first = ok.index(False)
            return ok[:first] + [False] * (len(ok) - first)
        done = pool.rows_io(False, keys, indices, skip=True) if pool.rows is not None else None
        if done is not None:  # one store call: the leading run looked up and read
            n, statuses = done
            statuses = statuses[:n]
        else:
            n = pool.exists_prefix(keys, lookup=False)
        if n < len(keys):
            self._count(get_not_read=len(keys) - n, get_misses=1, get_pages=1)
        if n == 0:
            return [False] * len(keys)
        if done is None:
            statuses = pool.io(False, keys[:n], pool.pages(indices, 0, n))
        ok = self._tally("get", pool, statuses, time.perf_counter() - start)
        return ok + [False] * (len(keys) - n)

    # ---- v1: the KV pool, zero-copy ----------------------------------------------------

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        try:
            pool = self._ready()
            if pool is None:
                return [False] * len(keys)
            return self._get_pages(pool, keys, host_indices)
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang's prefetch thread
            self._fail("batch_get_v1", exc)
            return [False] * len(keys)

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        try:
            if self._skip_write():
                self._count(skipped_writes=len(keys))
                return [True] * len(keys)
            pool = self._ready()
            if pool is None:
                return [False] * len(keys)
            return self._set_pages(pool, keys, host_indices)
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang's backup thread
            self._fail("batch_set_v1", exc)
            return [False] * len(keys)

    # ---- existence ---------------------------------------------------------------------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        try:
            pool = self._ready()
            if pool is None:
                return 0
            self._count(exists_calls=1)
            return pool.exists_prefix(list(keys))
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_exists", exc)
            return 0

    def exists(self, key: str) -> bool:
        try:
            pool = self._ready()
            if pool is None:
                return False
            if isinstance(key, str) and key.endswith(".draft"):
                with self._lock:
                    drafts = list(self._drafts.values())
                return any(d.store.exists(key) for d in drafts)
            return pool.exists(key)
        except Exception as exc:  # noqa: BLE001
            self._fail("exists", exc)
            return False

    # ---- v2: SGLang's own result types -------------------------------------------------
    # The v2 calls are HybridCalls' (_sglang_hybrid.py); they answer in SGLang's own types,
    # which this module looks up (_sglang_attr).

    def _kv_name(self) -> Any:
        pool_name = _sglang_attr("sglang.srt.mem_cache.hicache_storage", "PoolName")
        return getattr(pool_name, "KV", "kv") if pool_name is not None else "kv"

    @staticmethod
    def _transfer_result(kv_hit_pages: int, counts: Dict[Any, int]) -> Any:
        cls = _sglang_attr("sglang.srt.mem_cache.hicache_storage", "PoolTransferResult")
        if cls is not None:
            try:
                return cls(kv_hit_pages, counts)
            except Exception:  # noqa: BLE001 - another shape: ours below
                pass
        return PoolTransferResult(kv_hit_pages, counts)

    # ---- management --------------------------------------------------------------------

    def clear(self) -> bool:
        """Removes this deployment's pages (its namespaces), and nobody else's. Every other
        adapter of these namespaces, in any process, sees them gone on its next call."""
        try:
            with self._lock:
                pools = list(self._pools.values())
                drafts = list(self._drafts.values())
            if not pools:
                self._ready()
                return False
            ok = True
            for pool in pools:
                if self._skip_write(pool):
                    continue  # rank 0 owns the shared namespace
                for status in pool.clear():
                    if not status:
                        self._log("clear", "clear of pool %s failed: %s", pool.name, status)
                        ok = False
            if not self._skip_write():
                for draft in drafts:
                    status = draft.store.clear()
                    if not status:
                        self._log("clear", "clear of draft pages failed: %s", status)
                        ok = False
            return ok
        except Exception as exc:  # noqa: BLE001
            self._fail("clear", exc)
            return False

    def counters(self) -> Dict[str, Any]:
        """Cumulative adapter counters, with the KV store's own under 'store' and every
        pool's under 'pools'."""
        with self._lock:
            out: Dict[str, Any] = self._counters.snapshot()
            pools = dict(self._pools)
        try:
            if self._store is not None:
                out["store"] = self._store.stats()
            out["pools"] = {name: pool.stores[0].stats() for name, pool in pools.items()}
        except Exception:  # noqa: BLE001 - closed meanwhile
            pass
        return out

    def prometheus(self) -> str:
        """kvtier's metrics of every pool's store as Prometheus text, labelled with the
        namespace, pool and shard."""
        with self._lock:
            pools = list(self._pools.values())
        return prometheus(
            (store, [("pool", str(pool.name)), ("tp_rank", str(self.tp_rank)),
                     ("pp_rank", str(self.pp_rank))])
            for pool in pools for store in pool.stores)

    def _take_interval(self) -> Dict[str, list]:
        with self._lock:
            interval = {k: list(v) for k, v in self._interval.items()}
            for v in self._interval.values():
                v.clear()
        return interval

    def storage_metrics(self) -> KvtierStorageMetrics:
        """kvtier's own interval metrics (the KV pages and GB/s since the last call of this
        or get_stats) with the cumulative counters."""
        return KvtierStorageMetrics(counters=self.counters(), **self._take_interval())

    def get_stats(self):
        """SGLang's own StorageMetrics filled with the KV pages and GB/s since the last
        call, or None where SGLang is not importable (SGLang asserts the type)."""
        try:
            cls = _sglang_storage_metrics()
            interval = self._take_interval()
            if cls is None:
                return None
            try:
                metrics = cls()
            except TypeError:
                return cls(**interval)
            for k, v in interval.items():
                samples = getattr(metrics, k, None)
                if isinstance(samples, list):
                    samples.extend(v)
                else:
                    setattr(metrics, k, v)
            return metrics
        except Exception as exc:  # noqa: BLE001 - never raise into the scheduler
            self._fail("get_stats", exc)
            return None
