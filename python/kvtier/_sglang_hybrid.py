"""SGLang's v2 storage calls on kvtier: hybrid models' pool groups (a part of
kvtier.sglang.HiCacheKvtier).

A hybrid model's host pools (KV, Mamba, SWA, indexer, DeepSeek-V4's pools, draft pools) each
have a namespace of their own. batch_exists_v2 finds the greatest prefix that the KV pool and
every pool of the request can restore together; batch_get_v2 and batch_set_v2 move each
transfer's pages in its pool's namespace."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from kvtier._sglang_pool import _name_key, _Pool


class HybridCalls:
    """batch_exists_v2/batch_get_v2/batch_set_v2 of HiCacheKvtier, which holds the state they
    use: the pools by name (_pools) and its lock, the KV pool (_ready), the page moves
    (_get_pages, _set_pages, _skip_write), counters and log, and SGLang's own result types
    (_kv_name, _transfer_result: looked up by kvtier.sglang)."""

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
