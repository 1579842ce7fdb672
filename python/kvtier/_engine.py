"""What both engine adapters do alike (kvtier.sglang, kvtier.vllm_tier): the host memory an
engine hands over (addresses and sizes of tensors, arrays and buffers; registrations that are
released together), the outcomes of a batch (hits, misses and faults), counters with a
rate-limited log, and Prometheus text over the stores an adapter opened."""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import kvtier

logger = logging.getLogger("kvtier")

# ---- host memory ---------------------------------------------------------------------


def is_torch(obj: Any) -> bool:
    return hasattr(obj, "data_ptr") and hasattr(obj, "element_size")


def dtype_name(dtype: Any) -> str:
    """'bfloat16' for torch.bfloat16 and numpy's dtype('float16') -> 'float16' alike."""
    name = getattr(dtype, "name", None) if not hasattr(dtype, "is_floating_point") else None
    text = name or str(dtype)
    return text[len("torch."):] if text.startswith("torch.") else text


def address_size(obj: Any) -> Tuple[int, int]:
    """(address, nbytes) of a contiguous tensor, numpy array or writable buffer."""
    if is_torch(obj):
        if not obj.is_contiguous():
            raise kvtier.InvalidArgumentError("page tensor is not contiguous")
        return obj.data_ptr(), obj.numel() * obj.element_size()
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        if not obj.flags["C_CONTIGUOUS"]:
            raise kvtier.InvalidArgumentError("page array is not contiguous")
        return iface["data"][0], obj.nbytes
    if isinstance(obj, memoryview):
        if not obj.c_contiguous:
            raise kvtier.InvalidArgumentError("buffer is not contiguous")
        if obj.readonly:
            raise kvtier.InvalidArgumentError("buffer is read-only")
        if obj.nbytes == 0:
            return 0, 0
        return ctypes.addressof(ctypes.c_char.from_buffer(obj)), obj.nbytes
    raise kvtier.InvalidArgumentError(f"{type(obj).__name__} is not a tensor or array")


def empty_rows(like: Any, rows: int, row_bytes: int):
    """rows x row_bytes of uninitialised memory, typed like `like` (bytes when None)."""
    if like is not None and is_torch(like):
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


def copy_into(dst: Any, src: Any) -> None:
    dst_addr, dst_size = address_size(dst)
    src_addr, src_size = address_size(src)
    if src_size != dst_size:
        raise kvtier.InvalidArgumentError(
            f"page of {src_size} bytes where {dst_size} were expected")
    ctypes.memmove(dst_addr, src_addr, dst_size)


def gather(dst: int, pieces: Iterable[Tuple[int, int]]) -> None:
    """Copies the pieces (address, size), in order, to consecutive bytes at `dst`."""
    for address, size in pieces:
        ctypes.memmove(dst, address, size)
        dst += size


def scatter(src: int, pieces: Iterable[Tuple[int, int]]) -> None:
    """Copies consecutive bytes at `src` out to the pieces (address, size), in order."""
    for address, size in pieces:
        ctypes.memmove(address, src, size)
        src += size


class Registrations:
    """Host memory registered with one or more stores, released together (idempotent): what
    an adapter holds for the engine's pools and its own staging rows."""

    def __init__(self) -> None:
        self._held: List[Any] = []

    def add(self, stores: Sequence["kvtier.Store"], buffer: Any) -> None:
        """Registers `buffer` with every store, or with none (raises)."""
        added: List[Any] = []
        try:
            for store in stores:
                added.append(store.register_memory(buffer))
        except BaseException:
            for registration in added:
                registration.release()
            raise
        self._held += added

    def release(self) -> None:
        held, self._held = self._held, []
        for registration in held:
            registration.release()


# ---- outcomes and counters -----------------------------------------------------------


def all_pages(results: List[List[Any]]) -> List[Any]:
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


def outcomes(statuses: List[Any], write: bool) -> Tuple[List[bool], List[Any]]:
    """(done per page, the faults among them). A failed read of an absent, damaged or
    foreign page is a miss, not a fault; every failed write is a fault. A batch done whole
    (every outcome True) costs no look at a Status."""
    if all(s is True for s in statuses):
        return statuses, []
    ok = [bool(s) for s in statuses]
    return ok, [s for s in statuses if not s and (write or not s.is_miss)]


class Counters:
    """An adapter's cumulative counts (any thread may add), with a log that writes one line
    per kind every `interval` seconds and counts the lines in between."""

    def __init__(self, names: Iterable[str], log: Optional[logging.Logger] = None,
                 interval: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._values: Dict[str, int] = dict.fromkeys(names, 0)
        self._logger = log or logger
        self._interval = interval
        self._last: Dict[str, float] = {}
        self._suppressed: Dict[str, int] = {}

    def add(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._values[k] = self._values.get(k, 0) + v

    def snapshot(self) -> Dict[str, Any]:
        with self._lock:
            return dict(self._values)

    def log(self, kind: str, message: str, *args: Any) -> None:
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
        self._logger.warning("kvtier: " + message, *args)


def prometheus(stores: Iterable[Tuple["kvtier.Store", List[Tuple[str, str]]]]) -> str:
    """The stores' metrics as Prometheus text, each with its labels and its namespace."""
    text = []
    for store, labels in stores:
        try:
            text.append(store.prometheus([("namespace", store.namespace_id), *labels]))
        except Exception:  # noqa: BLE001 - closed meanwhile
            pass
    return "".join(text)
