"""SGLang's legacy (non-v1) storage calls on kvtier (a part of kvtier.sglang.HiCacheKvtier).

A legacy value is one flat page: the pool's pieces in memory order (SGLang's get_data_page).
KV pages inside the registered pool go zero-copy; others are staged. Pages of another size,
and keys ending in ".draft", are draft pages (speculative decoding's draft pool): a namespace
per page size, opened on first use."""

from __future__ import annotations

from typing import Any, List, Optional

import kvtier
from kvtier._engine import address_size, all_pages, empty_rows, gather, scatter
from kvtier._sglang_pool import _DraftPages, _Pool, _pool_tensors, _Staging


class LegacyCalls:
    """get/set/batch_get/batch_set of HiCacheKvtier, which holds the state they use: the KV
    pool (_kv), draft namespaces (_drafts), the legacy staging row (_legacy) and its lock,
    counters and log."""

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
        return [address_size(target_location)]

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
        ranges = [address_size(t) for t in _pool_tensors(pool.host)]
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
                gather(row, pieces)
            flat = pool.flat_pieces(row) if pool.zero_copy else [(row, pool.page_bytes)]
            ptrs, sizes = [p for p, _ in flat], [s for _, s in flat]
            statuses = [call([key], p, z).pages[0] for call, (p, z) in zip(
                [s.batch_put_pieces if write else s.batch_get_pieces for s in pool.stores],
                pool._per_store(ptrs, sizes))]
            status = all_pages([[st] for st in statuses])[0]
            if not write and status:
                scatter(row, pieces)
            return status

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None):
        try:
            pool = self._ready()
            if pool is None:
                return None
            if target_location is None:
                target_location = empty_rows(pool._flat_like(), 1, pool.page_bytes)[0]
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
