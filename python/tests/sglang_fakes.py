"""Stand-ins for the parts of SGLang's HiCache that a storage backend meets, written from
SGLang's code (read, not copied) so that the adapter is driven the way SGLang drives it.

Each class names the file and commit it mirrors:

- [storage]  sgl-project/sglang@001067fffe33427bee0ed2f007fb7551a1d76b44
             python/sglang/srt/mem_cache/hicache_storage.py
             (HiCacheStorageConfig, PoolName, PoolHitPolicy, PoolTransfer, PoolTransferResult,
             count_pool_hits, the HiCacheStorage interface)
- [hybrid]   hzh0425/sglang@36254e6d6d02cf28a486637a7aa0990a6df82b32
             python/sglang/srt/mem_cache/hybrid_cache/hybrid_cache_controller.py
             (backup: side pools through batch_set_v2, then KV through v1; prefetch:
             batch_exists_v2 over the whole request, KV through v1, then trailing keys
             re-aligned and batch_get_v2)
- [ctrl]     the cache_controller.py beside it (KV batches of STORAGE_BATCH_SIZE pages,
             the MLA backup skip on TP ranks other than 0, KV-derived side pools read with
             each KV batch, tp_lcm_size and should_split_heads)
- [mamba]    sgl-project/sglang@6d88eab9d39a2e2e91f168f1f76314d6475ae990
             python/sglang/srt/mem_cache/pool_host/mamba.py (page size 1, a temporal buffer
             and conv buffers, pieces temporal first then each conv, unequal sizes)
- [mha]      hzh0425/sglang@03855bda08537598d9310b2a44b640d19861969d
             python/sglang/srt/mem_cache/memory_pool_host.py (the four MHA layouts, page_head
             being (2, pages, heads, page, layers, head_dim))
- [indexer]  the DSA indexer host pool of the same tree (pool_host/, no kv_buffer, one piece
             per page of layers x page stride bytes, page_first* layouts only)
"""

from __future__ import annotations

import abc
import hashlib
import sys
import types
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from fakes import HostPool, host_indices  # noqa: F401 - re-exported for the tests

STORAGE_BATCH_SIZE = 128


# -- [storage] ------------------------------------------------------------------------------

@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


def storage_config(layout="page_first", tp_rank=0, tp_size=1, mla=False, tp_lcm_size=None,
                   model="test-model", metrics=False, **extra):
    """A config the way the controller builds it: tp_lcm_size taken out of the extra config,
    heads split only for non-MLA page_head pools with a larger lcm, page-first flag exact."""
    split = bool(tp_lcm_size) and not mla and layout == "page_head" and tp_lcm_size > tp_size
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
        attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=metrics,
        is_page_first_layout=layout == "page_first", model_name=model,
        tp_lcm_size=tp_lcm_size, should_split_heads=split, extra_config=dict(extra))


class PoolName(str, Enum):
    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"
    DRAFT_INDEXER = "draft_indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    name: PoolName
    host_indices: Optional[torch.Tensor] = None
    device_indices: Optional[torch.Tensor] = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None


@dataclass
class PoolTransferResult:
    kv_hit_pages: int
    extra_pool_hit_pages: Dict[str, int]


def count_pool_hits(results: Dict[str, List[bool]]) -> Dict[str, int]:
    """Leading successes per pool, the way the controller counts them."""
    return {name: (rs.index(False) if False in rs else len(rs)) for name, rs in results.items()}


class HiCacheStorage(abc.ABC):
    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        raise AssertionError("a backend must implement register_mem_host_pool_v2")

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        raise NotImplementedError()

    def batch_get_v2(self, transfers, extra_info=None):
        raise NotImplementedError()

    def batch_set_v2(self, transfers, extra_info=None):
        raise NotImplementedError()

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        raise NotImplementedError()

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        raise NotImplementedError()

    @abc.abstractmethod
    def get(self, key, target_location=None, target_sizes=None): ...

    @abc.abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None): ...

    @abc.abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None): ...

    @abc.abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...

    @abc.abstractmethod
    def exists(self, key): ...

    def batch_exists(self, keys, extra_info=None):
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def clear(self):
        pass

    def get_stats(self):
        return None


@dataclass
class StorageMetrics:
    """observability/metrics_collector.py's per-interval storage samples."""

    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


def log_storage_metrics(storage_metrics):
    """The collector's check on every scheduler step when metrics are on."""
    if storage_metrics is None:
        return
    assert isinstance(storage_metrics, StorageMetrics)


def install_sglang(monkeypatch):
    """Installs a `sglang` package holding these classes (metrics at the new path only)."""
    mods = {}
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.observability"):
        mods[name] = types.ModuleType(name)
    storage = types.ModuleType("sglang.srt.mem_cache.hicache_storage")
    for cls in (HiCacheStorage, HiCacheStorageConfig, PoolName, PoolHitPolicy, PoolTransfer,
                PoolTransferResult):
        setattr(storage, cls.__name__, cls)
    storage.count_pool_hits = count_pool_hits
    storage.STORAGE_BATCH_SIZE = STORAGE_BATCH_SIZE
    metrics = types.ModuleType("sglang.srt.observability.metrics_collector")
    metrics.StorageMetrics = StorageMetrics
    mods[storage.__name__] = storage
    mods[metrics.__name__] = metrics
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    # The old path must not be importable: the adapter has to find the new one.
    monkeypatch.setitem(sys.modules, "sglang.srt.metrics", None)
    monkeypatch.setitem(sys.modules, "sglang.srt.metrics.collector", None)


# -- host pools -----------------------------------------------------------------------------

def _fill(tensors, seed):
    rng = np.random.default_rng(seed)
    for t in tensors:
        raw = rng.integers(0, 256, size=t.numel() * t.element_size(), dtype=np.uint8)
        t.view(-1).view(torch.uint8).copy_(torch.from_numpy(raw))


def _bytes(t):
    return t.contiguous().view(-1).view(torch.uint8).numpy().copy()


class MambaPoolHost:
    """[mamba] States of `slots` requests; one slot is one page (page_size 1)."""

    def __init__(self, slots=16, layers=3, temporal_shape=(2, 4, 4), conv_shapes=((6, 3),),
                 layout="page_first_direct", snapshot_kv_buffer=True):
        assert layout in ("page_first", "page_first_direct"), "Mamba needs page_first*"
        self.page_size = 1
        self.layout = layout
        self.size = slots
        self.num_mamba_layers = layers
        self.temporal_dtype = torch.float32
        self.conv_dtype = torch.bfloat16
        self.dtype = self.conv_dtype
        self.temporal_buffer = torch.zeros((slots, layers, 1) + tuple(temporal_shape),
                                           dtype=self.temporal_dtype)
        self.conv_buffer = [torch.zeros((slots, layers, 1) + tuple(s), dtype=self.conv_dtype)
                            for s in conv_shapes]
        if snapshot_kv_buffer:  # the upstream snapshot also exposes them as a list
            self.kv_buffer = [self.temporal_buffer, *self.conv_buffer]

    def get_hybrid_pool_buffer(self):
        return [self.temporal_buffer, *self.conv_buffer]

    def _page_tensors(self, index):
        return [self.temporal_buffer[index]] + [c[index] for c in self.conv_buffer]

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for i in indices.tolist():
            for t in self._page_tensors(i):
                ptrs.append(t.data_ptr())
                sizes.append(t.numel() * t.element_size())
        return ptrs, sizes

    def get_data_page(self, index, flat=True):
        return torch.cat([t.contiguous().view(-1).view(torch.uint8)
                          for t in self._page_tensors(int(index))])

    def get_dummy_flat_data_page(self):
        return torch.zeros_like(self.get_data_page(0))

    def set_from_flat_data_page(self, index, data_page):
        flat = data_page.contiguous().view(-1).view(torch.uint8)
        start = 0
        for t in self._page_tensors(int(index)):
            n = t.numel() * t.element_size()
            t.view(-1).view(torch.uint8).copy_(flat[start:start + n])
            start += n

    def fill_random(self, seed):
        _fill(self.get_hybrid_pool_buffer(), seed)

    def page_bytes(self, index):
        return np.concatenate([_bytes(t) for t in self._page_tensors(index)])


class IndexerPoolHost:
    """[indexer] DSA index keys riding on the KV pages: KV's page size and indices, one
    piece per page, and no kv_buffer at all."""

    def __init__(self, anchor, layers=3, page_stride=40):
        assert anchor.layout in ("page_first", "page_first_direct")
        self.page_size = anchor.page_size
        self.layout = anchor.layout
        self.size = anchor.size
        self.layer_num = layers
        self.dtype = torch.uint8
        pages = anchor.size // anchor.page_size
        self.index_k_with_scale_buffer = torch.zeros((pages, layers, 1, page_stride),
                                                     dtype=torch.uint8)

    def get_page_buffer_meta(self, indices):
        idx = indices.tolist()
        stride = self.index_k_with_scale_buffer[0].numel()
        base = self.index_k_with_scale_buffer.data_ptr()
        ptrs = [base + (idx[i] // self.page_size) * stride
                for i in range(0, len(idx), self.page_size)]
        return ptrs, [stride] * len(ptrs)

    def fill_random(self, seed):
        _fill([self.index_k_with_scale_buffer], seed)

    def page_bytes(self, index):
        return _bytes(self.index_k_with_scale_buffer[index // self.page_size])


class LogicalAnchor:
    """DeepSeek-V4's anchor: an index space with no bytes of its own (kv_buffer None)."""

    def __init__(self, tokens=64, page_size=4, layout="page_first"):
        self.page_size = page_size
        self.size = tokens
        self.layout = layout
        self.kv_buffer = None
        self.dtype = torch.bfloat16


@dataclass
class PoolEntry:
    name: PoolName
    host_pool: Any
    is_primary_index_anchor: bool = False


class HostPoolGroup:
    """A group of host pools; attribute reads fall through to the anchor's pool."""

    def __init__(self, entries: List[PoolEntry]):
        self.entries = entries
        self.anchor_entry = next(e for e in entries if e.is_primary_index_anchor)
        self.entry_map = {e.name: e for e in entries}

    def __getattr__(self, name):
        return getattr(self.anchor_entry.host_pool, name)


# -- the controller's call order ------------------------------------------------------------

class Driver:
    """Calls a backend in the order [hybrid] and [ctrl] do, for one rank."""

    def __init__(self, backend, kv_page_size, mla_backup_skip=False):
        self.backend = backend
        self.page_size = kv_page_size
        self.backup_skip = mla_backup_skip

    def backup(self, keys, kv_indices, side=()):
        """Side pools through batch_set_v2 first, then KV in batches; returns
        ({pool: [bool]}, pages of KV written as a prefix)."""
        side_results = self.backend.batch_set_v2(list(side)) if side else {}
        done = 0
        if not self.backup_skip:
            for i in range(0, len(keys), STORAGE_BATCH_SIZE):
                batch = keys[i:i + STORAGE_BATCH_SIZE]
                idx = kv_indices[i * self.page_size:(i + len(batch)) * self.page_size]
                if not all(self.backend.batch_set_v1(batch, idx)):
                    break
                done += len(batch)
        return side_results, done

    def prefetch(self, keys, kv_indices, side=(), derived=()):
        """batch_exists_v2 (or batch_exists), KV (with KV-derived pools per batch), then the
        trailing pools' keys re-aligned to the loaded prefix and batch_get_v2.
        Returns (hit pages, loaded KV pages, {pool: leading loaded pages})."""
        side = list(side)
        if side or derived:
            result = self.backend.batch_exists_v2(list(keys), side + list(derived))
            hit = result.kv_hit_pages
        else:
            hit = self.backend.batch_exists(list(keys))
        keys = list(keys[:hit])
        loaded = 0
        derived_hits: Dict[str, int] = {}
        for i in range(0, len(keys), STORAGE_BATCH_SIZE):
            batch = keys[i:i + STORAGE_BATCH_SIZE]
            idx = kv_indices[i * self.page_size:(i + len(batch)) * self.page_size]
            got = self.backend.batch_get_v1(batch, idx)
            n = got.index(False) if False in got else len(got)
            if derived:
                res = self.backend.batch_get_v2([
                    PoolTransfer(name=d.name, host_indices=idx, keys=batch) for d in derived])
                for name, c in count_pool_hits(res).items():
                    derived_hits[name] = derived_hits.get(name, 0) + c
                    n = min(n, c)
            loaded += n
            if n != len(batch):
                break
        side_hits: Dict[str, int] = {}
        if side and loaded == len(keys):
            for t in side:
                if t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                    trailing = len(t.keys) if t.keys else 1
                    t.keys = keys[max(0, loaded - trailing):loaded]
            side_hits = count_pool_hits(self.backend.batch_get_v2(side))
        side_hits.update(derived_hits)
        return hit, loaded, side_hits


def placeholder_keys(n):
    return ["__placeholder__"] * n


# -- the backend as the tests make it -------------------------------------------------------

def keys_for(prefix, n):
    """n distinct page keys (hex SHA-256 digests) named after `prefix`."""
    return [hashlib.sha256(f"{prefix}/{i}".encode()).hexdigest() for i in range(n)]


def make(module, store_dir, pool, config=None, **options):
    """`module`.HiCacheKvtier on `store_dir` with the options in the config's extra config
    (where SGLang passes them), `pool` registered."""
    config = config or storage_config(layout=getattr(pool, "layout", "page_first"))
    config.extra_config = dict(config.extra_config or {}, uri=f"file://{store_dir}", **options)
    backend = module.HiCacheKvtier(config, {})
    backend.register_mem_pool_host(pool)
    return backend
