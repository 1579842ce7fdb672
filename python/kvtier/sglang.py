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
    capacity      KVTIER_CAPACITY   most bytes this deployment's pages may take ("100GiB");
                                    least recently used pages are evicted (FILE stores only)
    min_free      KVTIER_MIN_FREE   bytes to leave free on the filesystem ("20GiB")
    staging_mb                      memory for staged pages, per direction (default 64)
    deadline_ms   KVTIER_DEADLINE_MS  longest a get/set/exists call waits for storage: later
                                    pages are misses, and a location that missed it is
                                    skipped until a probe finds it answering (FILE stores on
                                    network and FUSE filesystems, S3; default 10000; 0: none)
    isolate       KVTIER_ISOLATE    auto | on | off: which FILE locations run their I/O on
                                    kvtier's own threads so that a hung mount cannot hold
                                    SGLang's (default auto: network and FUSE filesystems)

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

import ctypes
import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import kvtier
from kvtier import _options

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
_BACKENDS = ("auto", "uring", "posix", "s3")
_DIRECT_IO = ("off", "auto", "on")
_FILE_LAYOUTS = ("", "files", "segments", "auto")
# The host layouts SGLang can store; page_first_kv_split (MLA on Ascend) it cannot.
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
# SGLang hands the backend at most this many pages per call.
STORAGE_BATCH_SIZE = 128


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


_option = _options.option
_as_bool = _options.as_bool
_parse_bytes = _options.parse_bytes


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
    if buffer is None or _is_torch(buffer):
        try:
            import torch

            return torch.arange(start, stop, dtype=torch.int64)
        except ImportError:
            pass
    import numpy

    return numpy.arange(start, stop, dtype=numpy.int64)


def _empty_rows(like: Any, rows: int, row_bytes: int):
    """rows x row_bytes of uninitialised memory, typed like `like` (bytes when None)."""
    if like is not None and _is_torch(like):
        import torch

        item = like.element_size()
        if row_bytes % item == 0:
            return torch.empty((rows, row_bytes // item), dtype=like.dtype)
        return torch.empty((rows, row_bytes), dtype=torch.uint8)
    import numpy

    dtype = getattr(like, "dtype", None) if like is not None else None
    item = numpy.dtype(dtype).itemsize if dtype is not None else 1
    if dtype is None or row_bytes % item:
        return numpy.empty((rows, row_bytes), dtype=numpy.uint8)
    return numpy.empty((rows, row_bytes // item), dtype=dtype)


class _Staging:
    """Registered rows of one page each, for pages that cannot go zero-copy (pools without
    piece metadata, legacy calls with memory outside the pool). One lock: one batch uses it
    at a time."""

    def __init__(self, stores: List["kvtier.Store"], like: Any, rows: int, page_bytes: int):
        self.rows = _empty_rows(like, rows, page_bytes)
        self.count = rows
        self.page_bytes = page_bytes
        self.address = _address_size(self.rows)[0]
        self.registrations: List[Any] = []
        try:
            for store in stores:
                self.registrations.append(store.register_memory(self.rows))
        except BaseException:
            self.release()
            raise
        self.lock = threading.Lock()

    def row(self, i: int):
        return self.rows[i]

    def row_address(self, i: int) -> int:
        return self.address + i * self.page_bytes

    def release(self) -> None:
        for registration in self.registrations:
            registration.release()
        self.registrations = []


def _name_key(name: Any) -> str:
    """A pool name as plain text: PoolName.MAMBA and "mamba" alike give "mamba"."""
    value = getattr(name, "value", name)
    return str(value)


class _Indices:
    """The host indices of one call: SGLang's tensor (or array, or list) and its values as
    a numpy int64 array (a CPU tensor's own memory, not copied: converting them to Python
    objects was most of a small call's cost), and the token range [lo, hi) of it that a step
    works on."""

    __slots__ = ("source", "values", "lo", "hi")

    def __init__(self, source: Any, values: Any, lo: int = 0, hi: Optional[int] = None):
        self.source = source
        self.values = values
        self.lo = lo
        self.hi = len(values) if hi is None else hi

    @classmethod
    def of(cls, host_indices: Any) -> "_Indices":
        import numpy

        if host_indices is None:
            raise kvtier.InvalidArgumentError("host_indices is None")
        values = None
        if _is_torch(host_indices):
            try:
                values = host_indices.numpy()
            except Exception:  # noqa: BLE001 - a tensor numpy cannot view: its values
                values = numpy.asarray(host_indices.tolist())
        else:
            values = numpy.asarray(host_indices)
        if values.ndim != 1:
            raise kvtier.InvalidArgumentError(
                f"host_indices has {values.ndim} dimensions, not one")
        if values.size and values.dtype.kind not in "iu":
            raise kvtier.InvalidArgumentError(
                f"host_indices holds {values.dtype}, not integers")
        return cls(host_indices, values.astype(numpy.int64, copy=False))

    def __len__(self) -> int:
        return self.hi - self.lo

    def span(self, lo: int, hi: int) -> "_Indices":
        """Tokens [lo, hi) of this range."""
        return _Indices(self.source, self.values, self.lo + lo, self.lo + hi)

    def tokens(self) -> Any:
        """The range's token indices (a numpy int64 array)."""
        if self.lo == 0 and self.hi == len(self.values):
            return self.values
        return self.values[self.lo:self.hi]

    def tensor(self) -> Any:
        """The range as SGLang passed it (what the pool's own methods take)."""
        if self.lo == 0 and self.hi == len(self.values):
            return self.source
        return self.source[self.lo:self.hi]


def _pool_tensors(host: Any) -> List[Any]:
    """The tensors (or arrays) holding a host pool's pages, each once."""
    found: List[Any] = []

    def walk(value: Any) -> None:
        if value is None:
            return
        if isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif _is_torch(value) or hasattr(value, "__array_interface__"):
            found.append(value)

    getter = getattr(host, "get_hybrid_pool_buffer", None)
    if callable(getter):
        try:
            walk(getter())
        except Exception:  # noqa: BLE001 - fall back to the attributes below
            pass
    try:  # pools whose pages live in several extents, each with its own buffer
        for extent in getattr(host, "extents", None) or []:
            walk(getattr(extent, "kv_buffer", None))
    except Exception:  # noqa: BLE001
        pass
    for attr in ("kv_buffer", "index_k_with_scale_buffer", "temporal_buffer", "conv_buffer",
                 "scale_host"):
        try:
            walk(getattr(host, attr, None))
        except Exception:  # noqa: BLE001 - a property that cannot answer
            pass
    out, seen = [], set()
    for t in found:
        try:
            address, size = _address_size(t)
        except kvtier.InvalidArgumentError:
            continue
        if size and (address, size) not in seen:
            seen.add((address, size))
            out.append(t)
    return out


class _Pool:
    """One host pool of SGLang and the namespace(s) holding its pages.

    A page is the pool's pieces for one page (get_page_buffer_meta), read and written in
    place; pools without piece metadata go through flat copies (get_data_page /
    set_from_flat_data_page). With heads split for a larger TP (page_head, tp_lcm_size) a
    page is `split` sub-pages, one per rank of the larger TP, each in that rank's namespace.
    A logical anchor (kv_buffer None) stores a one-byte marker per page: the index space
    exists without bytes of its own.
    """

    def __init__(self, adapter: "HiCacheKvtier", name: str, host: Any):
        self.name = name
        self.host = host
        self.is_kv = name == "kv"
        self.layout = str(getattr(host, "layout", None) or "page_first")
        if self.layout == "page_first_kv_split":
            raise kvtier.InvalidArgumentError(
                f"pool '{name}': host layout page_first_kv_split (MLA on Ascend) is not "
                "stored by SGLang's HiCache storage; start the server with another "
                "--hicache-mem-layout")
        self.page_size = int(getattr(host, "page_size", 1) or 1)
        self.logical = self.is_kv and getattr(host, "kv_buffer", False) is None
        self.stores: List[kvtier.Store] = []
        self.registrations: List[Any] = []
        self.staging_get: Optional[_Staging] = None
        self.staging_set: Optional[_Staging] = None
        self.marker = None
        self.zero_copy = False
        self.sizes: List[int] = []
        self.order: List[int] = []  # pieces in address (flat page) order
        # (first page's piece addresses, stride per piece, pages): see _fit_geometry.
        self.geometry: Optional[tuple] = None
        # (first, stride, sizes, pages) for the store's *_rows calls, when one store holds the
        # pages and the geometry fits: a batch then goes to the store in one call, its pieces
        # worked out there from the host indices.
        self.rows: Optional[tuple] = None
        self.split = 1
        # The keys the last batch_exists_v2 found in this pool (see _get_pages).
        self.confirmed: Optional[frozenset] = None
        # MLA-style models hold the same KV on every TP rank: their pools are one namespace,
        # written by rank 0. Mamba state is sharded by heads: every rank writes its own.
        self.replicated = adapter.is_mla and name not in ("mamba", "draft_mamba")
        dtype = getattr(host, "dtype", None)
        tensors = _pool_tensors(host)
        if dtype is None and tensors:
            dtype = tensors[0].dtype
        self.dtype = _dtype_name(dtype) if dtype is not None else "bytes"

        if self.logical:
            pieces, piece_bytes, layout = 1, 1, self.layout + "/anchor"
        else:
            self._probe(tensors)
            pieces = len(self.sizes)
            uniform = all(s == self.sizes[0] for s in self.sizes)
            piece_bytes = self.sizes[0] if uniform else 0
            layout = self.layout
            if not self.is_kv:
                layout += "/" + name
            if not self.zero_copy:
                pass  # one flat piece: the layout names the copy order
            elif not uniform:
                layout += "/" + "+".join(str(s) for s in self.sizes)
        self.page_bytes = sum(self.sizes) if self.sizes else 1

        self.split = adapter.split_factor if (self.is_kv and self.zero_copy) else 1
        if self.geometry is not None and self.split == 1 and \
                all(d >= 0 for d in self.geometry[1]):
            self.rows = (self.geometry[0], self.geometry[1], self.sizes, self.geometry[2])
        if self.split > 1:
            self._check_split()
            piece_bytes = piece_bytes // self.split if piece_bytes else 0
        try:
            ranks = [(adapter.tp_rank, adapter.tp_size)]
            if self.split > 1:
                ranks = [(adapter.tp_rank * self.split + j, adapter.tp_size * self.split)
                         for j in range(self.split)]
            sub_page = self.page_bytes // self.split if not self.logical else 1
            for tp in ranks:
                self.stores.append(adapter.open_store(
                    dtype=self.dtype, layout=layout, page_tokens=self.page_size,
                    piece_bytes=piece_bytes, pieces=pieces, tp=tp, mla=self.replicated,
                    page_bytes=sub_page))
            if self.logical:
                import numpy

                self.marker = numpy.ones(1, dtype=numpy.uint8)
                for store in self.stores:
                    self.registrations.append(store.register_memory(self.marker))
            else:
                for tensor in tensors:
                    for store in self.stores:
                        self.registrations.append(store.register_memory(tensor))
                if not self.zero_copy:
                    rows = max(1, min(STORAGE_BATCH_SIZE, adapter.staging_bytes //
                                      max(1, self.page_bytes)))
                    like = self._flat_like()
                    self.staging_get = _Staging(self.stores, like, rows, self.page_bytes)
                    self.staging_set = _Staging(self.stores, like, rows, self.page_bytes)
        except BaseException:
            self.close()
            raise

    # ---- geometry ----------------------------------------------------------------------

    def _probe(self, tensors: List[Any]) -> None:
        """Zero-copy when the pool gives each page's pieces inside its own tensors."""
        meta = getattr(self.host, "get_page_buffer_meta", None)
        if callable(meta):
            try:
                ptrs, sizes = meta(_arange_like(tensors[0] if tensors else None, 0,
                                                self.page_size))
                ptrs, sizes = [int(p) for p in ptrs], [int(s) for s in sizes]
            except Exception:  # noqa: BLE001 - layouts the pool cannot describe: staged
                ptrs, sizes = [], []
            ranges = [_address_size(t) for t in tensors]
            inside = all(any(a <= p and p + s <= a + n for a, n in ranges)
                         for p, s in zip(ptrs, sizes))
            if ptrs and len(ptrs) == len(sizes) and all(sizes) and inside:
                self.zero_copy = True
                self.sizes = sizes
                self.order = sorted(range(len(ptrs)), key=lambda i: ptrs[i])
                self._fit_geometry(meta, tensors, ranges, ptrs)
                return
        flat = self._flat_like()
        if flat is None:
            raise kvtier.InvalidArgumentError(
                f"pool '{self.name}' ({type(self.host).__name__}, layout {self.layout}) "
                "gives neither page pieces (get_page_buffer_meta) nor flat pages "
                "(get_data_page)")
        self.sizes = [_address_size(flat)[1]]
        self.order = [0]

    def _fit_geometry(self, meta: Any, tensors: List[Any], ranges: List[tuple],
                      first: List[int]) -> None:
        """Learns where any page's pieces are, once: piece i of page p at first[i] +
        p * stride[i]. It holds for every host pool SGLang has (a page's pieces are rows of
        tensors allocated at startup), and is checked here against the pool's own
        get_page_buffer_meta at the second, a middle and the last page; a pool it does not
        fit keeps being asked on every call."""
        pages = int(getattr(self.host, "size", 0) or 0) // self.page_size
        if pages < 3:
            return
        like = tensors[0] if tensors else None

        def pieces(page: int):
            lo = page * self.page_size
            ptrs, sizes = meta(_arange_like(like, lo, lo + self.page_size))
            return [int(p) for p in ptrs], [int(z) for z in sizes]

        try:
            second, sizes = pieces(1)
            if sizes != self.sizes:
                return
            stride = [b - a for a, b in zip(first, second)]
            for page in (pages // 2, pages - 1):
                ptrs, sizes = pieces(page)
                if sizes != self.sizes or \
                        ptrs != [a + page * d for a, d in zip(first, stride)]:
                    return
        except Exception:  # noqa: BLE001 - the pool answers per call, as before
            return
        # Every page between the first and the last inside the same registered tensor.
        last = [a + (pages - 1) * d for a, d in zip(first, stride)]
        for a, b, z in zip(first, last, self.sizes):
            if not any(lo <= min(a, b) and max(a, b) + z <= lo + n for lo, n in ranges):
                return
        self.geometry = (first, stride, pages)

    def page_meta(self, indices: _Indices) -> tuple:
        """(ptrs, sizes) of the pages at `indices` in the pool's memory: from the geometry
        learnt at registration for page-aligned indices inside the pool, else from the
        pool's get_page_buffer_meta. (Batches of a pool that one store holds go through
        rows_io, which works the pieces out in the store's call.)"""
        if self.geometry is not None:
            first, stride, pages = self.geometry
            ps = self.page_size
            starts = indices.tokens()[::ps].tolist()
            if all(0 <= i < pages * ps and not i % ps for i in starts):
                geometry = list(zip(first, stride))
                ptrs = [a + (i // ps) * d for i in starts for a, d in geometry]
                return ptrs, self.sizes * len(starts)
        ptrs, sizes = self.host.get_page_buffer_meta(indices.tensor())
        return list(map(int, ptrs)), list(map(int, sizes))

    def _flat_like(self) -> Any:
        host = self.host
        try:
            if hasattr(host, "get_dummy_flat_data_page"):
                return host.get_dummy_flat_data_page()
            if hasattr(host, "get_data_page"):
                return host.get_data_page(0, flat=True)
        except Exception:  # noqa: BLE001
            return None
        return None

    def _check_split(self) -> None:
        n = len(self.sizes)
        heads = getattr(self.host, "head_num", None)
        if self.layout != "page_head" or n % 2:
            raise kvtier.InvalidArgumentError(
                f"heads can be split only for page_head pools with K and V pieces "
                f"(layout {self.layout}, {n} pieces per page)")
        half = n // 2
        if half % self.split and (half != 1 or self.sizes[0] % self.split):
            raise kvtier.InvalidArgumentError(
                f"{half} K pieces of {self.sizes[0]} bytes cannot be split {self.split} ways")
        if heads is not None and int(heads) % self.split:
            raise kvtier.InvalidArgumentError(
                f"{heads} heads cannot be split {self.split} ways (tp_lcm_size / tp_size)")

    def _per_store(self, ptrs: List[int], sizes: List[int]):
        """The pieces of n pages, as (ptrs, sizes) for each store (sub-pages with split
        heads: the heads of rank j of the larger TP, K then V)."""
        if self.split == 1:
            return [(ptrs, sizes)]
        k = len(self.sizes)
        half = k // 2
        out = [([], []) for _ in range(self.split)]
        for first in range(0, len(ptrs), k):
            for part in (0, 1):  # K, then V
                base = first + part * half
                if half % self.split == 0:
                    group = half // self.split
                    for j in range(self.split):
                        for i in range(base + j * group, base + (j + 1) * group):
                            out[j][0].append(ptrs[i])
                            out[j][1].append(sizes[i])
                else:  # one piece holding every head: heads are outermost, cut it in bytes
                    chunk = sizes[base] // self.split
                    for j in range(self.split):
                        out[j][0].append(ptrs[base] + j * chunk)
                        out[j][1].append(chunk)
        return out

    def flat_pieces(self, address: int) -> List[tuple]:
        """A flat page at `address` (the pool's pieces in memory order, as get_data_page
        gives it) as the store's pieces."""
        offsets = [0] * len(self.sizes)
        offset = 0
        for i in self.order:
            offsets[i] = offset
            offset += self.sizes[i]
        return [(address + offsets[i], self.sizes[i]) for i in range(len(self.sizes))]

    # ---- pages -------------------------------------------------------------------------

    def indices(self, keys: List[str], host_indices: Any) -> _Indices:
        """`host_indices` converted once, or raises unless it holds a page's token indices
        for each key."""
        indices = _Indices.of(host_indices)
        if len(indices) != len(keys) * self.page_size:
            raise kvtier.InvalidArgumentError(
                f"pool '{self.name}': {len(keys)} keys need {len(keys) * self.page_size} "
                f"host indices (page size {self.page_size}), got {len(indices)}")
        return indices

    def starts(self, indices: _Indices) -> List[int]:
        """Each page's first token index (what get_data_page takes)."""
        return [int(i) for i in indices.tokens()[::self.page_size]]

    def exists_prefix(self, keys: List[str]) -> int:
        n = len(keys)
        for store in self.stores:
            if n == 0:
                break
            n = min(n, store.batch_exists(list(keys[:n])))
        return n

    def exists(self, key: str) -> bool:
        return all(store.exists(key) for store in self.stores)

    def pages(self, indices: _Indices, first_page: int, pages: int) -> _Indices:
        return indices.span(first_page * self.page_size, (first_page + pages) * self.page_size)

    def rows_io(self, write: bool, keys: List[str], indices: _Indices, skip: bool) -> tuple:
        """One store call for the whole batch (see _Pool.rows): (n, outcomes) where n is,
        with `skip`, the leading run of pages already stored (write: not written again) or
        found (read: the only ones read); outcomes as _pieces_io's, for every page. None
        where the indices are not the pool's page starts (the caller asks the pool)."""
        first, stride, sizes, pages = self.rows
        store = self.stores[0]
        call = store.batch_put_rows if write else store.batch_get_rows
        try:
            n, result = call(keys, indices.tokens(), self.page_size, first, stride, sizes,
                             pages, skip)
        except kvtier.InvalidArgumentError:
            return None
        if result.ok_count == len(keys):
            return n, [True] * len(keys)
        return n, result.pages

    def io(self, write: bool, keys: List[str], indices: _Indices):
        """Reads or writes pages (all of them); returns the per-page outcomes."""
        if self.rows is not None:
            done = self.rows_io(write, keys, indices, skip=False)
            if done is not None:
                return done[1]
        if self.logical:
            ptrs, sizes = [_address_size(self.marker)[0]] * len(keys), [1] * len(keys)
            return self._pieces_io(write, keys, [(ptrs, sizes)])
        if self.zero_copy:
            return self._pieces_io(write, keys, self._pool_pieces(keys, indices))
        return self._staged_io(write, keys, self.starts(indices))

    def _pool_pieces(self, keys: List[str], indices: _Indices):
        """The pool's own memory of the pages (get_page_buffer_meta), per store."""
        ptrs, sizes = self.page_meta(indices)
        if len(ptrs) != len(keys) * len(self.sizes) or len(sizes) != len(ptrs):
            raise kvtier.InvalidArgumentError(
                f"pool '{self.name}' described {len(ptrs)} pieces for {len(keys)} pages "
                f"of {len(self.sizes)}")
        return self._per_store(ptrs, sizes)

    def _pieces_io(self, write: bool, keys: List[str], per_store) -> List[Any]:
        """Per-page outcomes: True for a page done, its Status where not. A batch that went
        through whole costs no Status object per page (the common case, and what a small
        page's call time is made of)."""
        results = []
        for store, (ptrs, sizes) in zip(self.stores, per_store):
            call = store.batch_put_pieces if write else store.batch_get_pieces
            result = call(keys, ptrs, sizes)
            results.append([True] * len(keys) if result.all_ok else result.pages)
        return _all_pages(results)

    def _staged_io(self, write: bool, keys: List[str], starts: List[int]) -> List[Any]:
        staging = self.staging_set if write else self.staging_get
        out: List[Any] = []
        with staging.lock:
            for base in range(0, len(keys), staging.count):
                chunk = keys[base:base + staging.count]
                rows = [staging.row(j) for j in range(len(chunk))]
                if write:
                    for j, row in enumerate(rows):
                        _copy_into(row, self.host.get_data_page(starts[base + j], flat=True))
                per_store = [([], []) for _ in self.stores]
                for j in range(len(chunk)):
                    address = staging.row_address(j)
                    for s in range(len(self.stores)):
                        per_store[s][0].append(address)
                        per_store[s][1].append(self.page_bytes)
                statuses = self._pieces_io(write, chunk, per_store)
                if not write:
                    for j, status in enumerate(statuses):
                        if status:
                            self.host.set_from_flat_data_page(starts[base + j], rows[j])
                out += statuses
        return out

    def clear(self) -> List[Any]:
        return [store.clear() for store in self.stores]

    def layout_summary(self) -> str:
        """The store's file layout and, when chosen by auto, why."""
        try:
            return str(self.stores[0].stats().get("layout") or "")
        except Exception:  # noqa: BLE001 - closed meanwhile
            return ""

    def close(self) -> None:
        for staging in (self.staging_get, self.staging_set):
            if staging is not None:
                staging.release()
        self.staging_get = self.staging_set = None
        for registration in self.registrations:
            registration.release()
        self.registrations = []
        for store in self.stores:
            store.close()


def _all_pages(results: List[List[Any]]) -> List[Any]:
    """Per-store outcomes of the same pages as one list: a page is there only when every
    sub-page is (the first failure is the page's)."""
    if len(results) == 1:
        return results[0]
    statuses: Optional[List[Any]] = None
    for result in results:
        if statuses is None:
            statuses = list(result)
        else:
            statuses = [a if not a else b for a, b in zip(statuses, result)]
    return statuses or []


def _copy_into(dst: Any, src: Any) -> None:
    dst_addr, dst_size = _address_size(dst)
    src_addr, src_size = _address_size(src)
    if src_size != dst_size:
        raise kvtier.InvalidArgumentError(
            f"page of {src_size} bytes where {dst_size} were expected")
    ctypes.memmove(dst_addr, src_addr, dst_size)


class _DraftPages:
    """Pages of one size that are not the target pool's (speculative draft pages, keys
    "<hash>.draft"): a namespace of their own geometry, staged through one registered row."""

    def __init__(self, store: "kvtier.Store", page_bytes: int):
        self.store = store
        self.page_bytes = page_bytes
        self.staging = _Staging([store], None, 1, page_bytes)

    def io(self, key: str, pieces: List[tuple], write: bool) -> Any:
        staging = self.staging
        with staging.lock:
            row = staging.row_address(0)
            offset = 0
            if write:
                for address, size in pieces:
                    ctypes.memmove(row + offset, address, size)
                    offset += size
                return self.store.put(key, (row, self.page_bytes))
            status = self.store.get(key, (row, self.page_bytes))
            if status:
                for address, size in pieces:
                    ctypes.memmove(address, row + offset, size)
                    offset += size
            return status

    def close(self) -> None:
        self.staging.release()
        self.store.close()


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
        self.file_layout = str(_option(options, "file_layout", "KVTIER_FILE_LAYOUT", "") or "")
        if self.file_layout not in _FILE_LAYOUTS:
            raise kvtier.InvalidArgumentError(
                f"file_layout '{self.file_layout}': expected files, segments or auto")
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
        deadline = _option(options, "deadline_ms", "KVTIER_DEADLINE_MS", None)
        self.deadline_ms = None if deadline in (None, "") else int(deadline)
        if self.deadline_ms is not None and self.deadline_ms < 0:
            raise kvtier.InvalidArgumentError(f"deadline_ms {self.deadline_ms} is negative")
        self.isolate = str(_option(options, "isolate", "KVTIER_ISOLATE", "") or "")
        if self.isolate not in ("", "auto", "on", "off"):
            raise kvtier.InvalidArgumentError(
                f"isolate '{self.isolate}': expected auto, on or off")

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
        self._log = _RateLimitedLog()
        self._counters = {"get_pages": 0, "get_hits": 0, "get_misses": 0, "get_faults": 0,
                          "get_not_read": 0, "set_pages": 0, "set_ok": 0, "set_faults": 0,
                          "set_present": 0, "exists_calls": 0, "errors": 0,
                          "skipped_writes": 0, "unknown_pool": 0, "draft_pages": 0}
        self._interval = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [],
                          "backup_bandwidth": []}

    # ---- setup -------------------------------------------------------------------------

    def open_store(self, *, dtype: str, layout: str, page_tokens: int, piece_bytes: int,
                   pieces: int, tp: tuple, mla: bool, page_bytes: int = 0) -> "kvtier.Store":
        """A store of this deployment (model, shard, salt, options) for one page geometry
        (`page_bytes`: the page's size where its pieces differ, for file_layout auto)."""
        uri = _options.with_store_params(self.uri, backend=self.backend,
                                         deadline_ms=self.deadline_ms, isolate=self.isolate)
        return kvtier.Store(
            uri, model=self.model_name, dtype=dtype, layout=layout, page_tokens=page_tokens,
            piece_bytes=piece_bytes, pieces_per_page=pieces, tp=tp,
            pp=(self.pp_rank, self.pp_size), cp=(self.cp_rank, self.cp_size), mla=mla,
            salt=self.salt, fsync=self.fsync, direct_io=self.direct_io,
            capacity_bytes=self.capacity_bytes, min_free_bytes=self.min_free_bytes,
            file_layout=self.file_layout, page_bytes=page_bytes)

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

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._counters[k] += v

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
        if all(s is True for s in statuses):  # a batch done whole: no Status to look at
            ok, faults = statuses, []
        else:
            ok = [bool(s) for s in statuses]
            # A failed read of an absent or corrupt page is a miss; every failed write is a
            # fault.
            faults = [s for s in statuses if not s and (kind == "set" or not s.is_miss)]
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
        present = pool.exists_prefix(keys)
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
            n = pool.exists_prefix(keys)
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

    # ---- v2: hybrid models' pool groups ------------------------------------------------

    def _pool_for(self, name: Any) -> Optional[_Pool]:
        with self._lock:
            pool = self._pools.get(_name_key(name))
        if pool is None:
            self._count(unknown_pool=1)
            self._log("unknown-pool", "pool '%s' was never registered "
                      "(register_mem_host_pool_v2): answering as a miss", _name_key(name))
        return pool

    @staticmethod
    def _transfer_fields(t: Any):
        """(name, keys, hit policy) of a PoolTransfer, or of a constraint dict
        {"name", "policy", "trailing_pages"} as some controllers pass."""
        if isinstance(t, dict):
            trailing = int(t.get("trailing_pages", 1) or 1)
            keys = t.get("keys") or [None] * trailing
            return t.get("name"), keys, str(getattr(t.get("policy"), "value",
                                                    t.get("policy") or "all_pages"))
        policy = getattr(t, "hit_policy", "all_pages")
        return t.name, getattr(t, "keys", None), str(getattr(policy, "value", policy))

    def batch_exists_v2(self, keys: List[str], pool_transfers: Any = None,
                        extra_info: Any = None) -> Any:
        """The greatest prefix of `keys` that the KV pool and every pool of
        `pool_transfers` can restore together: all_pages pools need every page of it,
        trailing_pages pools the last len(transfer.keys) pages (their keys are placeholders
        here: the pages are looked up under the KV keys)."""
        try:
            kv = self._ready()
            keys = list(keys)
            if kv is None:
                return self._transfer_result(0, {})
            self._count(exists_calls=1)
            limit = kv.exists_prefix(keys)
            trailing = []
            leading = []
            names = []
            for t in pool_transfers or []:
                name, tkeys, policy = self._transfer_fields(t)
                names.append(name)
                pool = self._pool_for(name)
                if pool is None:
                    limit = 0
                elif policy == "trailing_pages":
                    trailing.append((pool, max(1, len(tkeys) if tkeys else 1)))
                else:
                    leading.append(pool)
                    if limit:
                        limit = min(limit, pool.exists_prefix(keys[:limit]))
            length = self._trailing_prefix(keys, limit, trailing)
            # What was found, for the batch_get_v2 that follows (SGLang's order): its pages
            # are read without a second look at the index.
            for pool in leading:
                pool.confirmed = frozenset(keys[:length]) if length else None
            for pool, n in trailing:
                pool.confirmed = frozenset(keys[max(0, length - n):length]) if length else None
            counts = {self._kv_name(): length}
            for name in names:
                counts[name] = length
            return self._transfer_result(length, counts)
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_exists_v2", exc)
            return self._transfer_result(0, {})

    @staticmethod
    def _trailing_prefix(keys: List[str], limit: int, trailing) -> int:
        """Greatest L <= limit such that every trailing pool holds pages [L - n, L): one
        batch_exists per pool and window; a page missing at i rules out every window that
        holds it, so the next window ends at i."""
        length = limit
        while length > 0:
            missing = None
            for pool, n in trailing:
                first = max(0, length - n)
                present = pool.exists_prefix(keys[first:length])
                if present < length - first:
                    missing = first + present
                    break
            if missing is None:
                return length
            length = missing
        return 0

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

    def _v2(self, write: bool, transfers: Any) -> Dict[Any, List[bool]]:
        out: Dict[Any, List[bool]] = {}
        what = "batch_set_v2" if write else "batch_get_v2"
        for t in transfers or []:
            name = getattr(t, "name", None)
            try:
                keys = list(getattr(t, "keys", None) or [])
            except Exception:  # noqa: BLE001
                keys = []
            try:
                pool = self._pool_for(name)
                if pool is None:
                    out[name] = [False] * len(keys)
                elif write and self._skip_write(pool):
                    self._count(skipped_writes=len(keys))
                    out[name] = [True] * len(keys)
                elif write:
                    out[name] = self._set_pages(pool, keys, t.host_indices)
                else:
                    found = pool.confirmed
                    confirmed = found is not None and all(k in found for k in keys)
                    out[name] = self._get_pages(pool, keys, t.host_indices, confirmed)
            except Exception as exc:  # noqa: BLE001 - never raise into SGLang's threads
                self._fail(what, exc)
                out[name] = [False] * len(keys)
        return out

    def batch_set_v2(self, transfers: Any, extra_info: Any = None) -> Dict[Any, List[bool]]:
        """Writes each transfer's pages to its pool's namespace; {transfer.name: [bool]}."""
        try:
            return self._v2(True, transfers)
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_set_v2", exc)
            return {}

    def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> Dict[Any, List[bool]]:
        """Reads each transfer's pages (the leading run); {transfer.name: [bool]}."""
        try:
            return self._v2(False, transfers)
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_get_v2", exc)
            return {}

    # ---- legacy (non-v1) calls ---------------------------------------------------------
    # A legacy value is one flat page: the pool's pieces in memory order (SGLang's
    # get_data_page). KV pages inside the registered pool go zero-copy; others are staged.
    # Pages of another size, and keys ending in ".draft", are draft pages (speculative
    # decoding's draft pool): a namespace per page size, opened on first use.

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

    def _draft(self, page_bytes: int) -> _DraftPages:
        with self._lock:
            draft = self._drafts.get(page_bytes)
            if draft is not None:
                return draft
            kv = self._kv
            store = self.open_store(dtype=kv.dtype, layout=f"{kv.layout}/draft",
                                    page_tokens=kv.page_size, piece_bytes=page_bytes,
                                    pieces=1, tp=(self.tp_rank, self.tp_size), mla=self.is_mla)
            try:
                draft = _DraftPages(store, page_bytes)
            except BaseException:
                store.close()
                raise
            self._drafts[page_bytes] = draft
            return draft

    def _is_draft(self, key: str, pieces) -> bool:
        total = sum(size for _, size in pieces)
        return key.endswith(".draft") or total != self.page_bytes or self._kv.logical

    def _kv_pieces(self, pool: _Pool, pieces) -> Optional[List[tuple]]:
        """The store's pieces for a legacy KV page inside the registered pool, else None."""
        if not pool.zero_copy or pool.split > 1:
            return None
        if len(pieces) == 1:
            candidate = pool.flat_pieces(pieces[0][0])
        elif [s for _, s in pieces] == pool.sizes:
            candidate = list(pieces)
        else:
            return None
        ranges = [_address_size(t) for t in _pool_tensors(pool.host)]
        if all(any(a <= p and p + s <= a + n for a, n in ranges) for p, s in candidate):
            return candidate
        return None

    def _legacy_kv(self, pool: _Pool, key: str, pieces, write: bool) -> Any:
        direct = self._kv_pieces(pool, pieces)
        if direct is not None:
            return pool.stores[0].put(key, direct) if write else \
                pool.stores[0].get(key, direct)
        with self._lock:
            if self._legacy is None:
                self._legacy = _Staging(pool.stores, pool._flat_like(), 1, pool.page_bytes)
            staging = self._legacy
        with staging.lock:
            row = staging.row_address(0)
            if write:
                offset = 0
                for address, size in pieces:
                    ctypes.memmove(row + offset, address, size)
                    offset += size
            flat = pool.flat_pieces(row) if pool.zero_copy else [(row, pool.page_bytes)]
            ptrs, sizes = [p for p, _ in flat], [s for _, s in flat]
            statuses = [call([key], p, z).pages[0] for call, (p, z) in zip(
                [s.batch_put_pieces if write else s.batch_get_pieces for s in pool.stores],
                pool._per_store(ptrs, sizes))]
            status = _all_pages([[st] for st in statuses])[0]
            if not write and status:
                offset = 0
                for address, size in pieces:
                    ctypes.memmove(address, row + offset, size)
                    offset += size
            return status

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None):
        try:
            pool = self._ready()
            if pool is None:
                return None
            if target_location is None:
                target_location = _empty_rows(pool._flat_like(), 1, pool.page_bytes)[0]
            pieces = self._location(target_location, target_sizes)
            if self._is_draft(key, pieces):
                status = self._draft(sum(s for _, s in pieces)).io(key, pieces, write=False)
                self._count(draft_pages=1)
            else:
                status = self._legacy_kv(pool, key, pieces, write=False)
            self._count(get_pages=1, get_hits=int(bool(status)),
                        get_misses=int(status.is_miss),
                        get_faults=int(not status and not status.is_miss))
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
        try:
            n = len(keys)
            locations = target_locations if target_locations is not None else [None] * n
            sizes = target_sizes if target_sizes is not None else [None] * n
            if len(locations) != n or len(sizes) != n:
                raise kvtier.InvalidArgumentError(
                    f"{n} keys, {len(locations)} targets, {len(sizes)} sizes")
            return [self.get(k, loc, sz) for k, loc, sz in zip(keys, locations, sizes)]
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_get", exc)
            return [None] * len(keys)

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        try:
            if self._skip_write():
                self._count(skipped_writes=1)
                return True
            pool = self._ready()
            if pool is None:
                return False
            source = value if value is not None else target_location
            pieces = self._location(source, target_sizes)
            if self._is_draft(key, pieces):
                draft = self._draft(sum(s for _, s in pieces))
                self._count(draft_pages=1)
                if draft.store.exists(key):
                    self._count(set_present=1)
                    return True
                status = draft.io(key, pieces, write=True)
            else:
                if pool.exists(key):
                    self._count(set_present=1)
                    return True
                status = self._legacy_kv(pool, key, pieces, write=True)
            self._count(set_pages=1, set_ok=int(bool(status)), set_faults=int(not status))
            if not status:
                self._log("set-fault", "set failed: %s", status)
            return bool(status)
        except Exception as exc:  # noqa: BLE001
            self._fail("set", exc)
            return False

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        try:
            n = len(keys)
            values = values if values is not None else [None] * n
            locations = target_locations if target_locations is not None else [None] * n
            sizes = target_sizes if target_sizes is not None else [None] * n
            if len(values) != n or len(locations) != n or len(sizes) != n:
                raise kvtier.InvalidArgumentError(
                    f"{n} keys, {len(values)} values, {len(locations)} targets")
            results = [self.set(k, v, loc, sz)
                       for k, v, loc, sz in zip(keys, values, locations, sizes)]
            return all(results)
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_set", exc)
            return False

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
            out: Dict[str, Any] = dict(self._counters)
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
        text = []
        for pool in pools:
            for store in pool.stores:
                labels = [("namespace", store.namespace_id), ("pool", str(pool.name)),
                          ("tp_rank", str(self.tp_rank)), ("pp_rank", str(self.pp_rank))]
                try:
                    text.append(store.prometheus(labels))
                except Exception:  # noqa: BLE001 - closed meanwhile
                    pass
        return "".join(text)

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
