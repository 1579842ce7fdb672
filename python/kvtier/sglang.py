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
    fsync         KVTIER_FSYNC      true: a page is durable before batch_set reports it
    salt          KVTIER_SALT       tenant/deployment salt: different salts never share pages
                                    ("tenant" is accepted as a synonym)
    model_revision                  weights revision, appended to the model name
    capacity      KVTIER_CAPACITY   most bytes this deployment's pages may take ("100GiB");
                                    least recently used pages are evicted (FILE stores only)
    min_free      KVTIER_MIN_FREE   bytes to leave free on the filesystem ("20GiB")
    staging_mb                      memory for layer_first staging, per direction (default 64)

Pages are shared exactly between servers whose model, revision, dtype, memory layout, page
size, page geometry, TP/PP/CP shard, MLA flag and salt agree; anything else gets its own
namespace. Attention-DP replicas of the same shard compute the same KV and share pages.

The adapter never raises into SGLang's threads once constructed: storage faults and caller
errors become False/None/0 with a counter (get_stats) and a rate-limited log line.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import kvtier

try:  # Subclass SGLang's interface when SGLang is importable; work without it.
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _HiCacheStorage
except Exception:  # noqa: BLE001 - any import failure means "no SGLang here"
    _HiCacheStorage = object

try:
    from sglang.srt.metrics.collector import StorageMetrics as _SglangStorageMetrics
except Exception:  # noqa: BLE001
    _SglangStorageMetrics = None

logger = logging.getLogger(__name__)

DEFAULT_URI = "file:///tmp/kvtier-hicache"
_BACKENDS = ("auto", "uring", "posix", "s3")
_DIRECT_IO = ("off", "auto", "on")
_ZERO_COPY_LAYOUTS = ("page_first", "page_first_direct")
_STAGED_LAYOUTS = ("layer_first",)
# SGLang hands the backend at most this many pages per call.
STORAGE_BATCH_SIZE = 128


@dataclass
class KvtierStorageMetrics:
    """What get_stats() returns when SGLang's StorageMetrics is not importable: the same
    per-interval lists, plus kvtier's cumulative counters."""

    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)
    counters: Dict[str, Any] = field(default_factory=dict)


class _RateLimitedLog:
    """One line per `interval` seconds per kind; the lines in between are counted."""

    def __init__(self, interval: float = 10.0):
        self._interval = interval
        self._lock = threading.Lock()
        self._last: Dict[str, float] = {}
        self._suppressed: Dict[str, int] = {}

    def __call__(self, kind: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._interval:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return
            self._last[kind] = now
            suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            message += " (%d similar suppressed)"
            args = (*args, suppressed)
        logger.warning("kvtier: " + message, *args)


def _option(options: Dict[str, Any], key: str, env: Optional[str], default: Any) -> Any:
    value = options.get(key)
    if value is None and env is not None:
        value = os.environ.get(env)
    return default if value is None else value


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}


def _parse_bytes(value: Any, name: str) -> int:
    """100, "100GiB", "1.5TB", "64 MiB" -> bytes; 0/None/"" -> 0 (no limit)."""
    if value in (None, ""):
        return 0
    if isinstance(value, (int, float)):
        if value < 0:
            raise kvtier.InvalidArgumentError(f"{name}: {value} is negative")
        return int(value)
    text = str(value).strip().lower().replace(" ", "")
    digits = len(text) - len(text.lstrip("0123456789."))
    number, unit = text[:digits], text[digits:]
    if not number or unit not in _UNITS:
        raise kvtier.InvalidArgumentError(
            f"{name}: '{value}' is not a size (examples: 107374182400, 100GiB, 1.5TB)")
    return int(float(number) * _UNITS[unit])


def _dtype_name(dtype: Any) -> str:
    """'bfloat16' for torch.bfloat16 and numpy's dtype('float16') -> 'float16' alike."""
    name = getattr(dtype, "name", None) if not hasattr(dtype, "is_floating_point") else None
    text = name or str(dtype)
    return text[len("torch."):] if text.startswith("torch.") else text


def _is_torch(obj: Any) -> bool:
    return hasattr(obj, "data_ptr") and hasattr(obj, "element_size")


def _address_size(obj: Any):
    """(address, nbytes) of a contiguous tensor or numpy array."""
    if _is_torch(obj):
        if not obj.is_contiguous():
            raise kvtier.InvalidArgumentError("page tensor is not contiguous")
        return obj.data_ptr(), obj.numel() * obj.element_size()
    iface = getattr(obj, "__array_interface__", None)
    if iface is None:
        raise kvtier.InvalidArgumentError(f"{type(obj).__name__} is not a tensor or array")
    if not obj.flags["C_CONTIGUOUS"]:
        raise kvtier.InvalidArgumentError("page array is not contiguous")
    return iface["data"][0], obj.nbytes


def _itemsize(buffer: Any) -> int:
    return buffer.element_size() if _is_torch(buffer) else buffer.itemsize


def _arange_like(buffer: Any, start: int, stop: int):
    """Token indices in the library of the pool's buffer (what SGLang passes: torch)."""
    if _is_torch(buffer):
        import torch

        return torch.arange(start, stop, dtype=torch.int64)
    import numpy

    return numpy.arange(start, stop, dtype=numpy.int64)


def _empty_rows(buffer: Any, rows: int, row_bytes: int):
    """rows x row_bytes of uninitialised memory, typed like the pool's buffer."""
    elems = row_bytes // _itemsize(buffer)
    if _is_torch(buffer):
        import torch

        return torch.empty((rows, elems), dtype=buffer.dtype)
    import numpy

    return numpy.empty((rows, elems), dtype=buffer.dtype)


class _Staging:
    """Registered rows of one page each, for pages that cannot go zero-copy (layer_first,
    legacy calls with memory outside the pool). One lock: one batch uses it at a time."""

    def __init__(self, store: "kvtier.Store", like: Any, rows: int, page_bytes: int):
        self.rows = _empty_rows(like, rows, page_bytes)
        self.count = rows
        self.page_bytes = page_bytes
        self.registration = store.register_memory(self.rows)
        self.lock = threading.Lock()

    def row(self, i: int):
        return self.rows[i]

    def release(self) -> None:
        self.registration.release()


class HiCacheKvtier(_HiCacheStorage):
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
        # model_name and extra_config; newer ones add PP/CP/DP and metrics.
        self.tp_rank = int(getattr(cfg, "tp_rank", 0) or 0)
        self.tp_size = int(getattr(cfg, "tp_size", 1) or 1)
        self.pp_rank = int(getattr(cfg, "pp_rank", 0) or 0)
        self.pp_size = int(getattr(cfg, "pp_size", 1) or 1)
        self.cp_rank = int(getattr(cfg, "attn_cp_rank", 0) or 0)
        self.cp_size = int(getattr(cfg, "attn_cp_size", 1) or 1)
        self.is_mla = bool(getattr(cfg, "is_mla_model", False))
        self.model_name = getattr(cfg, "model_name", None) or ""
        self.enable_metrics = bool(getattr(cfg, "enable_storage_metrics", False))

        self.uri = str(_option(options, "uri", "KVTIER_URI", None) or
                       options.get("directory") or options.get("path") or DEFAULT_URI)
        self.backend = str(_option(options, "backend", "KVTIER_BACKEND", "auto"))
        if self.backend not in _BACKENDS:
            raise kvtier.InvalidArgumentError(
                f"backend '{self.backend}': expected one of {', '.join(_BACKENDS)}")
        self.direct_io = str(_option(options, "direct_io", "KVTIER_DIRECT_IO", "off"))
        if self.direct_io not in _DIRECT_IO:
            raise kvtier.InvalidArgumentError(
                f"direct_io '{self.direct_io}': expected one of {', '.join(_DIRECT_IO)}")
        self.fsync = _as_bool(_option(options, "fsync", "KVTIER_FSYNC", False))
        self.salt = str(_option(options, "salt", "KVTIER_SALT", None) or
                        options.get("tenant") or "")
        revision = options.get("model_revision")
        if revision:
            self.model_name = f"{self.model_name}@{revision}"
        self.capacity_bytes = _parse_bytes(
            _option(options, "capacity", "KVTIER_CAPACITY", 0), "capacity")
        self.min_free_bytes = _parse_bytes(
            _option(options, "min_free", "KVTIER_MIN_FREE", 0), "min_free")
        self.staging_bytes = int(float(options.get("staging_mb", 64)) * (1 << 20))

        self._lock = threading.Lock()
        self._store: Optional[kvtier.Store] = None
        self._pool_registration: Optional[kvtier.Registration] = None
        self._pool_range = (0, 0)
        self._staging_get: Optional[_Staging] = None  # layer_first reads
        self._staging_set: Optional[_Staging] = None  # layer_first writes
        self._staging_legacy: Optional[_Staging] = None  # legacy calls outside the pool
        self.mem_pool_host = None
        self.layout = None
        self.page_size = 0
        self.page_bytes = 0
        self.pieces_per_page = 0
        self._log = _RateLimitedLog()
        self._counters = {"get_pages": 0, "get_hits": 0, "get_misses": 0, "get_faults": 0,
                          "set_pages": 0, "set_ok": 0, "set_faults": 0, "exists_calls": 0,
                          "errors": 0, "skipped_writes": 0}
        self._interval = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [],
                          "backup_bandwidth": []}

    # ---- setup -------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Registers the host pool's whole kv_buffer once and opens this shard's namespace."""
        if self._store is not None:
            raise kvtier.InvalidArgumentError("register_mem_pool_host was already called")
        self.mem_pool_host = mem_pool_host
        buffer = mem_pool_host.kv_buffer
        self.layout = str(getattr(mem_pool_host, "layout", "layer_first"))
        self.page_size = int(mem_pool_host.page_size)
        if self.layout in _ZERO_COPY_LAYOUTS:
            ptrs, sizes = mem_pool_host.get_page_buffer_meta(
                _arange_like(buffer, 0, self.page_size))
            ptrs, sizes = list(ptrs), list(sizes)
            if not sizes or any(s != sizes[0] for s in sizes):
                raise kvtier.InvalidArgumentError(
                    f"{self.layout} page pieces of unequal sizes {sizes}")
            self.pieces_per_page = len(sizes)
            piece_bytes = int(sizes[0])
        elif self.layout in _STAGED_LAYOUTS:
            if hasattr(mem_pool_host, "get_dummy_flat_data_page"):
                flat = mem_pool_host.get_dummy_flat_data_page()
            else:
                flat = mem_pool_host.get_data_page(0, flat=True)
            self.pieces_per_page = 1
            piece_bytes = _address_size(flat)[1]
        else:
            raise kvtier.InvalidArgumentError(f"host pool layout '{self.layout}' is unknown")
        self.page_bytes = piece_bytes * self.pieces_per_page

        uri = self.uri
        if self.backend != "auto" and "backend=" not in uri and "://" in uri and \
                not uri.startswith("s3://"):
            uri += ("&" if "?" in uri else "?") + f"backend={self.backend}"
        store = kvtier.Store(
            uri,
            model=self.model_name,
            dtype=_dtype_name(getattr(mem_pool_host, "dtype", None) or buffer.dtype),
            layout=self.layout,
            page_tokens=self.page_size,
            piece_bytes=piece_bytes,
            pieces_per_page=self.pieces_per_page,
            tp=(self.tp_rank, self.tp_size),
            pp=(self.pp_rank, self.pp_size),
            cp=(self.cp_rank, self.cp_size),
            mla=self.is_mla,
            salt=self.salt,
            fsync=self.fsync,
            direct_io=self.direct_io,
            capacity_bytes=self.capacity_bytes,
            min_free_bytes=self.min_free_bytes,
        )
        try:
            self._pool_registration = store.register_memory(buffer)
            self._pool_range = (self._pool_registration.address,
                                self._pool_registration.address + self._pool_registration.nbytes)
            rows = max(1, min(STORAGE_BATCH_SIZE, self.staging_bytes // self.page_bytes))
            if self.layout in _STAGED_LAYOUTS:
                self._staging_get = _Staging(store, buffer, rows, self.page_bytes)
                self._staging_set = _Staging(store, buffer, rows, self.page_bytes)
        except BaseException:
            self._release(store)
            raise
        self._store = store
        logger.info("kvtier: %s, namespace %s (%s %s, %d x %d B pages), %s", store.backend,
                    store.namespace_id, self.model_name, self.layout, self.pieces_per_page,
                    piece_bytes, "zero-copy" if self._staging_get is None else "staged")

    def _release(self, store: Optional[kvtier.Store]) -> None:
        for staging in (self._staging_get, self._staging_set, self._staging_legacy):
            if staging is not None:
                staging.release()
        self._staging_get = self._staging_set = self._staging_legacy = None
        if self._pool_registration is not None:
            self._pool_registration.release()
            self._pool_registration = None
        if store is not None:
            store.close()

    def close(self) -> None:
        """Waits for calls in flight, releases every registration and closes the store."""
        with self._lock:
            store, self._store = self._store, None
        self._release(store)

    # ---- helpers -----------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._counters[k] += v

    def _ready(self) -> Optional[kvtier.Store]:
        store = self._store
        if store is None:
            self._log("not-ready", "call before register_mem_pool_host or after close: "
                      "answering as a miss")
        return store

    def _fail(self, what: str, exc: BaseException) -> None:
        self._count(errors=1)
        self._log(what, "%s failed: %s: %s", what, type(exc).__name__, exc)

    def _tally(self, kind: str, result: kvtier.BatchResult, seconds: float) -> List[bool]:
        ok = result.ok
        hits = sum(ok)
        # A failed read of an absent or corrupt page is a miss; every failed write is a fault.
        faults = [s for s in result.pages if not s.ok and (kind == "set" or not s.is_miss)]
        if kind == "get":
            self._count(get_pages=len(ok), get_hits=hits,
                        get_misses=len(ok) - hits - len(faults), get_faults=len(faults))
        else:
            self._count(set_pages=len(ok), set_ok=hits, set_faults=len(faults))
        if faults:
            self._log(f"{kind}-fault", "%d of %d pages in batch_%s_v1 failed: %s",
                      len(faults), len(ok), kind, faults[0])
        with self._lock:
            pgs, bw = ("prefetch_pgs", "prefetch_bandwidth") if kind == "get" else \
                ("backup_pgs", "backup_bandwidth")
            self._interval[pgs].append(hits)
            if seconds > 0:
                self._interval[bw].append(hits * self.page_bytes / seconds / 1e9)
        return ok

    def _page_starts(self, keys: List[str], host_indices: Any) -> List[int]:
        indices = host_indices.tolist() if hasattr(host_indices, "tolist") else list(host_indices)
        if len(indices) != len(keys) * self.page_size:
            raise kvtier.InvalidArgumentError(
                f"{len(keys)} keys need {len(keys) * self.page_size} host indices, "
                f"got {len(indices)}")
        return [int(indices[i * self.page_size]) for i in range(len(keys))]

    def _skip_write(self) -> bool:
        # MLA: every TP rank holds the same KV; rank 0 writes for all.
        return self.is_mla and self.tp_rank != 0

    # ---- v1: zero-copy batches ---------------------------------------------------------

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        try:
            store = self._ready()
            if store is None or not keys:
                return [False] * len(keys)
            start = time.perf_counter()
            if self._staging_get is None:
                self._page_starts(keys, host_indices)  # length check
                ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
                result = store.batch_get_pieces(list(keys), list(ptrs), list(sizes))
                return self._tally("get", result, time.perf_counter() - start)
            starts = self._page_starts(keys, host_indices)
            out: List[bool] = []
            staging = self._staging_get
            with staging.lock:
                for base in range(0, len(keys), staging.count):
                    chunk = keys[base:base + staging.count]
                    result = store.batch_get(list(chunk),
                                             [staging.row(j) for j in range(len(chunk))])
                    for j, ok in enumerate(result.ok):
                        if ok:
                            self.mem_pool_host.set_from_flat_data_page(starts[base + j],
                                                                       staging.row(j))
                    out += self._tally("get", result, time.perf_counter() - start)
                    start = time.perf_counter()
            return out
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang's prefetch thread
            self._fail("batch_get_v1", exc)
            return [False] * len(keys)

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        try:
            if self._skip_write():
                self._count(skipped_writes=len(keys))
                return [True] * len(keys)
            store = self._ready()
            if store is None or not keys:
                return [False] * len(keys)
            start = time.perf_counter()
            if self._staging_set is None:
                self._page_starts(keys, host_indices)
                ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
                result = store.batch_put_pieces(list(keys), list(ptrs), list(sizes))
                return self._tally("set", result, time.perf_counter() - start)
            starts = self._page_starts(keys, host_indices)
            out: List[bool] = []
            staging = self._staging_set
            with staging.lock:
                for base in range(0, len(keys), staging.count):
                    chunk = keys[base:base + staging.count]
                    for j in range(len(chunk)):
                        page = self.mem_pool_host.get_data_page(starts[base + j], flat=True)
                        self._copy(staging.row(j), page)
                    result = store.batch_put(list(chunk),
                                             [staging.row(j) for j in range(len(chunk))])
                    out += self._tally("set", result, time.perf_counter() - start)
                    start = time.perf_counter()
            return out
        except Exception as exc:  # noqa: BLE001 - never raise into SGLang's backup thread
            self._fail("batch_set_v1", exc)
            return [False] * len(keys)

    def _copy(self, dst: Any, src: Any) -> None:
        dst_addr, dst_size = _address_size(dst)
        src_addr, src_size = _address_size(src)
        if src_size != dst_size:
            raise kvtier.InvalidArgumentError(
                f"page of {src_size} bytes where {dst_size} were expected")
        ctypes.memmove(dst_addr, src_addr, dst_size)

    # ---- existence ---------------------------------------------------------------------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        try:
            store = self._ready()
            if store is None:
                return 0
            self._count(exists_calls=1)
            return store.batch_exists(list(keys))
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_exists", exc)
            return 0

    def exists(self, key: str) -> bool:
        try:
            store = self._ready()
            return store is not None and store.exists(key)
        except Exception as exc:  # noqa: BLE001
            self._fail("exists", exc)
            return False

    # ---- legacy (non-v1) calls ---------------------------------------------------------
    # A legacy value is one flat page: the page's pieces back to back (for page_first and
    # page_first_direct that is exactly SGLang's flat data page). Memory inside the
    # registered pool goes zero-copy; anything else is copied through a staging row.

    def _split(self, pieces):
        """A legacy page as the store's pieces: one flat run is cut into the namespace's
        pieces; pieces given separately must already be the namespace's pieces."""
        total = sum(size for _, size in pieces)
        if total != self.page_bytes:
            raise kvtier.InvalidArgumentError(
                f"page of {total} bytes where {self.page_bytes} were expected")
        if len(pieces) == 1:
            address = pieces[0][0]
            piece = total // self.pieces_per_page
            return [(address + i * piece, piece) for i in range(self.pieces_per_page)]
        if len(pieces) != self.pieces_per_page:
            raise kvtier.InvalidArgumentError(
                f"{len(pieces)} pieces where {self.pieces_per_page} were expected")
        return pieces

    def _in_pool(self, pieces) -> bool:
        lo, hi = self._pool_range
        return all(lo <= address and address + size <= hi for address, size in pieces)

    def _legacy_staging(self, store: kvtier.Store) -> _Staging:
        with self._lock:
            if self._staging_legacy is None:
                self._staging_legacy = _Staging(store, self.mem_pool_host.kv_buffer, 1,
                                                self.page_bytes)
            return self._staging_legacy

    @staticmethod
    def _location(target_location: Any, target_sizes: Any):
        """The (address, nbytes) pieces of a legacy target: a tensor/array, an address with
        its size, or lists of addresses and sizes."""
        if isinstance(target_location, int):
            size = target_sizes if isinstance(target_sizes, int) else sum(target_sizes or [])
            return [(target_location, int(size))]
        if isinstance(target_location, (list, tuple)):
            sizes = list(target_sizes or [])
            if len(sizes) != len(target_location):
                raise kvtier.InvalidArgumentError(
                    f"{len(target_location)} addresses but {len(sizes)} sizes")
            return [(int(a), int(s)) for a, s in zip(target_location, sizes)]
        return [_address_size(target_location)]

    def _staged_io(self, store: kvtier.Store, key: str, pieces, write: bool):
        """A legacy page outside the pool, copied through a registered staging row."""
        staging = self._legacy_staging(store)
        with staging.lock:
            row, _ = _address_size(staging.row(0))
            offset = 0
            if write:
                for address, size in pieces:
                    ctypes.memmove(row + offset, address, size)
                    offset += size
                return store.put(key, self._split([(row, self.page_bytes)]))
            status = store.get(key, self._split([(row, self.page_bytes)]))
            if status:
                for address, size in pieces:
                    ctypes.memmove(address, row + offset, size)
                    offset += size
            return status

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None):
        try:
            store = self._ready()
            if store is None:
                return None
            if target_location is None:
                target_location = _empty_rows(self.mem_pool_host.kv_buffer, 1,
                                              self.page_bytes)[0]
            pieces = self._location(target_location, target_sizes)
            if self._in_pool(pieces):
                status = store.get(key, self._split(pieces))
            else:
                self._split(pieces)  # size check before any I/O
                status = self._staged_io(store, key, pieces, write=False)
            self._count(get_pages=1, get_hits=int(bool(status)),
                        get_misses=int(status.is_miss), get_faults=int(not status and
                                                                        not status.is_miss))
            if not status:
                if not status.is_miss:
                    self._log("get-fault", "get failed: %s", status)
                return None
            return target_location
        except Exception as exc:  # noqa: BLE001
            self._fail("get", exc)
            return None

    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> List[Any]:
        locations = target_locations if target_locations is not None else [None] * len(keys)
        sizes = target_sizes if target_sizes is not None else [None] * len(keys)
        return [self.get(k, loc, sz) for k, loc, sz in zip(keys, locations, sizes)]

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        try:
            if self._skip_write():
                self._count(skipped_writes=1)
                return True
            store = self._ready()
            if store is None:
                return False
            source = value if value is not None else target_location
            pieces = self._location(source, target_sizes)
            if self._in_pool(pieces):
                status = store.put(key, self._split(pieces))
            else:
                self._split(pieces)
                status = self._staged_io(store, key, pieces, write=True)
            self._count(set_pages=1, set_ok=int(bool(status)), set_faults=int(not status))
            if not status:
                self._log("set-fault", "set failed: %s", status)
            return bool(status)
        except Exception as exc:  # noqa: BLE001
            self._fail("set", exc)
            return False

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        n = len(keys)
        values = values if values is not None else [None] * n
        locations = target_locations if target_locations is not None else [None] * n
        sizes = target_sizes if target_sizes is not None else [None] * n
        results = [self.set(k, v, loc, sz) for k, v, loc, sz in zip(keys, values, locations, sizes)]
        return all(results)

    # ---- management --------------------------------------------------------------------

    def clear(self) -> bool:
        """Removes this deployment's pages (its namespace), and nobody else's."""
        try:
            if self._skip_write():
                return True  # MLA: rank 0 owns the shared namespace
            store = self._ready()
            if store is None:
                return False
            status = store.clear()
            if not status:
                self._log("clear", "clear failed: %s", status)
            return bool(status)
        except Exception as exc:  # noqa: BLE001
            self._fail("clear", exc)
            return False

    def counters(self) -> Dict[str, Any]:
        """Cumulative adapter counters, with the store's own under 'store'."""
        with self._lock:
            out: Dict[str, Any] = dict(self._counters)
        store = self._store
        if store is not None:
            try:
                out["store"] = store.stats()
            except Exception:  # noqa: BLE001 - closed meanwhile
                pass
        return out

    def prometheus(self) -> str:
        """The store's metrics as Prometheus text, labelled with this shard."""
        store = self._store
        if store is None:
            return ""
        labels = (f'namespace="{store.namespace_id}",tp_rank="{self.tp_rank}",'
                  f'pp_rank="{self.pp_rank}"')
        try:
            return store.prometheus(labels)
        except Exception:  # noqa: BLE001 - closed meanwhile
            return ""

    def get_stats(self):
        """Pages and GB/s of every batch since the last call, and the cumulative counters."""
        with self._lock:
            interval = {k: list(v) for k, v in self._interval.items()}
            for v in self._interval.values():
                v.clear()
        if _SglangStorageMetrics is not None:
            metrics = _SglangStorageMetrics()
            for k, v in interval.items():
                getattr(metrics, k).extend(v)
            return metrics
        return KvtierStorageMetrics(counters=self.counters(), **interval)
