"""SGLang's host pools as kvtier sees them (used by kvtier.sglang): the token indices of a
call, where each page's pieces lie in a pool's memory, the namespace(s) a pool's pages live
in (one per rank of a larger TP when heads are split), and staged rows for pages that cannot
move in place."""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Protocol, Tuple

import kvtier
from kvtier._engine import (Registrations, address_size, all_pages, copy_into, dtype_name,
                            empty_rows, gather, is_torch, scatter)

# SGLang hands the backend at most this many pages per call.
STORAGE_BATCH_SIZE = 128


def _arange_like(buffer: Any, start: int, stop: int):
    """Token indices in the library of the pool's buffer (what SGLang passes: torch)."""
    if buffer is None or is_torch(buffer):
        try:
            import torch

            return torch.arange(start, stop, dtype=torch.int64)
        except ImportError:
            pass
    import numpy

    return numpy.arange(start, stop, dtype=numpy.int64)


class _Staging:
    """Registered rows of one page each, for pages that cannot go zero-copy (pools without
    piece metadata, legacy calls with memory outside the pool). One lock: one batch uses it
    at a time."""

    def __init__(self, stores: List["kvtier.Store"], like: Any, rows: int, page_bytes: int):
        self.rows = empty_rows(like, rows, page_bytes)
        self.count = rows
        self.page_bytes = page_bytes
        self.address = address_size(self.rows)[0]
        self.registrations = Registrations()
        self.registrations.add(stores, self.rows)
        self.lock = threading.Lock()

    def row(self, i: int):
        return self.rows[i]

    def row_address(self, i: int) -> int:
        return self.address + i * self.page_bytes

    def release(self) -> None:
        self.registrations.release()


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
        if is_torch(host_indices):
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
        elif is_torch(value) or hasattr(value, "__array_interface__"):
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
            address, size = address_size(t)
        except kvtier.InvalidArgumentError:
            continue
        if size and (address, size) not in seen:
            seen.add((address, size))
            out.append(t)
    return out


class PoolOwner(Protocol):
    """What a pool needs of the adapter that holds it (kvtier.sglang.HiCacheKvtier): the
    rank's place in TP, how its heads split, and a store for each namespace. Named here so
    this module depends on nothing above it."""

    is_mla: bool
    split_factor: int
    tp_rank: int
    tp_size: int
    staging_bytes: int

    def open_store(self, *, dtype: str, layout: str, page_tokens: int, piece_bytes: int,
                   pieces: int, tp: Tuple[int, int], mla: bool,
                   page_bytes: int = 0) -> kvtier.Store: ...


class _Pool:
    """One host pool of SGLang and the namespace(s) holding its pages.

    A page is the pool's pieces for one page (get_page_buffer_meta), read and written in
    place; pools without piece metadata go through flat copies (get_data_page /
    set_from_flat_data_page). With heads split for a larger TP (page_head, tp_lcm_size) a
    page is `split` sub-pages, one per rank of the larger TP, each in that rank's namespace.
    A logical anchor (kv_buffer None) stores a one-byte marker per page: the index space
    exists without bytes of its own.
    """

    def __init__(self, adapter: PoolOwner, name: str, host: Any):
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
        self.registrations = Registrations()
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
        self.dtype = dtype_name(dtype) if dtype is not None else "bytes"

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
                self.registrations.add(self.stores, self.marker)
            else:
                for tensor in tensors:
                    self.registrations.add(self.stores, tensor)
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
            ranges = [address_size(t) for t in tensors]
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
        self.sizes = [address_size(flat)[1]]
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

    def exists_prefix(self, keys: List[str], lookup: bool = True) -> int:
        """`lookup`: SGLang asked (batch_exists); False for the adapter's own check before
        a write or a read (the store's admission policy learns from lookups only)."""
        n = len(keys)
        for store in self.stores:
            if n == 0:
                break
            n = min(n, store.batch_exists(list(keys[:n]), lookup))
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
            ptrs, sizes = [address_size(self.marker)[0]] * len(keys), [1] * len(keys)
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
        return all_pages(results)

    def _staged_io(self, write: bool, keys: List[str], starts: List[int]) -> List[Any]:
        staging = self.staging_set if write else self.staging_get
        out: List[Any] = []
        with staging.lock:
            for base in range(0, len(keys), staging.count):
                chunk = keys[base:base + staging.count]
                rows = [staging.row(j) for j in range(len(chunk))]
                if write:
                    for j, row in enumerate(rows):
                        copy_into(row, self.host.get_data_page(starts[base + j], flat=True))
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
        self.registrations.release()
        for store in self.stores:
            store.close()


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
            if write:
                gather(row, pieces)
                return self.store.put(key, (row, self.page_bytes))
            status = self.store.get(key, (row, self.page_bytes))
            if status:
                scatter(row, pieces)
            return status

    def close(self) -> None:
        self.staging.release()
        self.store.close()
