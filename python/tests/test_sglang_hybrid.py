"""kvtier.sglang.HiCacheKvtier driven the way SGLang's current HiCache drives it: hybrid pool
groups through the v2 calls, DeepSeek-V4's logical anchor, less work per call, clear, SGLang's
metrics type, bad input, and resources and threads. The host pools' memory (every layout,
page addresses, heads split between TP sizes, draft pages) is test_sglang_host_pools.py's.

The fakes (sglang_fakes.py) are written from SGLang's code and cite the files they mirror.
Where the real `sglang` package is importable, test_against_real_sglang runs the same
driver against its classes."""

import importlib
import logging
import multiprocessing

import numpy as np
import pytest
import torch

import kvtier.sglang as adapter_module
from conftest import open_fds, writer_and_reader
from fakes import LAYOUTS, HostPool, host_indices
from sglang_fakes import (
    Driver,
    HostPoolGroup,
    IndexerPoolHost,
    LogicalAnchor,
    MambaPoolHost,
    PoolEntry,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    StorageMetrics,
    keys_for,
    log_storage_metrics,
    make,
    placeholder_keys,
    storage_config,
)

TRAILING = PoolHitPolicy.TRAILING_PAGES


def idx(slots):
    return torch.tensor(list(slots), dtype=torch.int64)


class Hybrid:
    """One server's pools: KV, Mamba and SWA, registered the way HybridCacheController does."""

    def __init__(self, module, store_dir, seed=None, layout="page_first_direct", config=None,
                 **options):
        self.kv = HostPool(layout=layout, backing="torch", tokens=128, page_size=4)
        self.mamba = MambaPoolHost(slots=16, layout=layout)
        self.swa = HostPool(layout=layout, backing="torch", tokens=64, page_size=4, layers=2)
        if seed is not None:
            self.kv.fill_random(seed)
            self.mamba.fill_random(seed + 1)
            self.swa.fill_random(seed + 2)
        # SGLang hands a hybrid model's backend the pool group, then each of its entries.
        self.group = HostPoolGroup([PoolEntry(PoolName.KV, self.kv, True),
                                    PoolEntry(PoolName.MAMBA, self.mamba),
                                    PoolEntry(PoolName.SWA, self.swa)])
        self.backend = make(module, store_dir, self.group, config, **options)
        for entry in self.group.entries:
            self.backend.register_mem_host_pool_v2(entry.host_pool, entry.name)
        self.driver = Driver(self.backend, self.kv.page_size)

    def kv_idx(self, pages):
        return host_indices(pages, self.kv.page_size)

    def side(self, keys, mamba_slot, swa_pages, placeholder=False):
        swa_keys = keys[-len(swa_pages):]
        return [
            PoolTransfer(name=PoolName.MAMBA, host_indices=idx([mamba_slot]),
                         keys=placeholder_keys(1) if placeholder else keys[-1:],
                         hit_policy=TRAILING),
            PoolTransfer(name=PoolName.SWA, host_indices=self.swa_idx(swa_pages),
                         keys=placeholder_keys(len(swa_pages)) if placeholder else swa_keys,
                         hit_policy=TRAILING),
        ]

    def swa_idx(self, pages):
        return host_indices(pages, self.swa.page_size)

    def close(self):
        self.backend.close()


# -- hybrid models through the controller's order -------------------------------------------

@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_hybrid_kv_mamba_swa_round_trip(sglang, store_dir, layout):
    src = Hybrid(sglang, store_dir, seed=10, layout=layout)
    keys = keys_for("hyb", 8)
    side = src.side(keys, mamba_slot=5, swa_pages=[2, 3])
    side_results, done = src.driver.backup(keys, src.kv_idx(range(8)), side)
    assert done == 8
    assert side_results == {PoolName.MAMBA: [True], PoolName.SWA: [True, True]}

    dst = Hybrid(sglang, store_dir, layout=layout)
    side = dst.side(keys, mamba_slot=11, swa_pages=[6, 7], placeholder=True)
    hit, loaded, hits = dst.driver.prefetch(keys, dst.kv_idx(range(10, 18)), side)
    assert (hit, loaded) == (8, 8)
    assert hits == {PoolName.MAMBA: 1, PoolName.SWA: 2}
    for i in range(8):
        assert np.array_equal(dst.kv.page_bytes((10 + i) * 4), src.kv.page_bytes(i * 4))
    assert np.array_equal(dst.mamba.page_bytes(11), src.mamba.page_bytes(5))
    for s, d in ((2, 6), (3, 7)):
        assert np.array_equal(dst.swa.page_bytes(d * 4), src.swa.page_bytes(s * 4))
    # Each pool in a namespace of its own, with its own piece geometry.
    ids = {n: p.stores[0].namespace_id for n, p in dst.backend._pools.items()}
    assert len(set(ids.values())) == 3
    mamba = dst.backend._pools["mamba"]
    assert mamba.zero_copy and len(set(mamba.sizes)) == 2  # unequal pieces
    # Every pool's small pages go to segments, unequal pieces too (the adapter gives the
    # store the page size); a second server keeps what it finds.
    for name, pool in src.backend._pools.items():
        assert pool.layout_summary() == \
            f"segments (auto: pages of {pool.page_bytes} B, below 4 MiB)", name
        assert dst.backend._pools[name].layout_summary() == \
            "segments (auto: the namespace already holds segments)", name
    src.close()
    dst.close()


def test_missing_trailing_mamba_page_shortens_the_prefix_to_what_can_be_restored(
        sglang, store_dir):
    src = Hybrid(sglang, store_dir, seed=20)
    keys = keys_for("trail", 8)
    # Request 1 covered 4 pages (Mamba state after page 3), request 2 all 8 pages, but its
    # state write failed: only the KV pages 4..7 landed.
    src.driver.backup(keys[:4], src.kv_idx(range(4)), src.side(keys[:4], 1, [2, 3]))
    src.driver.backup(keys, src.kv_idx(range(8)), [])
    src.backend.batch_set_v2([PoolTransfer(name=PoolName.SWA, host_indices=src.swa_idx([4, 5]),
                                           keys=keys[6:8], hit_policy=TRAILING)])
    dst = Hybrid(sglang, store_dir)
    side = dst.side(keys, mamba_slot=3, swa_pages=[0, 1], placeholder=True)
    result = dst.backend.batch_exists_v2(keys, side)
    assert result.kv_hit_pages == 4
    hit, loaded, hits = dst.driver.prefetch(keys, dst.kv_idx(range(8, 16)),
                                            dst.side(keys, 3, [0, 1], placeholder=True))
    assert (hit, loaded, hits) == (4, 4, {PoolName.MAMBA: 1, PoolName.SWA: 2})
    assert np.array_equal(dst.mamba.page_bytes(3), src.mamba.page_bytes(1))
    src.close()
    dst.close()


def test_pools_restore_one_common_prefix_not_the_minimum_of_their_own(sglang, store_dir):
    """Mamba can restore prefixes 4 and 7, SWA (2 trailing pages) prefixes 4 and 6: the
    minimum of the two pools' own answers (6) cannot be restored by Mamba; 4 can by both."""
    src = Hybrid(sglang, store_dir, seed=30)
    keys = keys_for("common", 8)
    src.driver.backup(keys, src.kv_idx(range(8)), [])
    b = src.backend
    b.batch_set_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=idx([0]), keys=[keys[3]]),
                    PoolTransfer(name=PoolName.MAMBA, host_indices=idx([1]), keys=[keys[6]]),
                    PoolTransfer(name=PoolName.SWA, host_indices=src.swa_idx([0, 1]),
                                 keys=keys[2:4]),
                    PoolTransfer(name=PoolName.SWA, host_indices=src.swa_idx([2, 3]),
                                 keys=keys[4:6])])
    side = src.side(keys, 0, [0, 1], placeholder=True)
    assert b.batch_exists_v2(keys, side).kv_hit_pages == 4
    assert b.batch_exists_v2(keys, side[:1]).kv_hit_pages == 7  # Mamba alone
    assert b.batch_exists_v2(keys, side[1:]).kv_hit_pages == 6  # SWA alone
    assert b.batch_exists_v2(keys[:3], side).kv_hit_pages == 0
    src.close()


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_missing_indexer_page_mid_prefix(sglang, store_dir, layout):
    kv = HostPool(layout=layout, mla=True, backing="torch", tokens=64)
    kv.fill_random(seed=40)
    indexer = IndexerPoolHost(kv)
    indexer.fill_random(seed=41)
    a = make(sglang, store_dir, kv, storage_config(mla=True, layout=layout))
    a.register_mem_host_pool_v2(indexer, PoolName.INDEXER)
    keys = keys_for("dsa", 6)
    kvi = host_indices(range(6), kv.page_size)
    derived = PoolTransfer(name=PoolName.INDEXER, indices_from_pool=PoolName.KV)
    assert a.batch_set_v2([PoolTransfer(name=PoolName.INDEXER, host_indices=kvi,
                                        keys=keys)]) == {PoolName.INDEXER: [True] * 6}
    assert a.batch_set_v1(keys, kvi) == [True] * 6
    a._pools["indexer"].stores[0].remove(keys[3])
    dst_kv = HostPool(layout=layout, mla=True, backing="torch", tokens=64)
    dst_ix = IndexerPoolHost(dst_kv)
    b = make(sglang, store_dir, dst_kv, storage_config(mla=True, tp_rank=1, tp_size=2,
                                                        layout=layout))
    b.register_mem_host_pool_v2(dst_ix, PoolName.INDEXER)
    driver = Driver(b, kv.page_size)
    hit, loaded, hits = driver.prefetch(keys, host_indices(range(8, 14), kv.page_size),
                                        derived=[derived])
    assert (hit, loaded, hits) == (3, 3, {PoolName.INDEXER: 3})
    for i in range(3):
        assert np.array_equal(dst_ix.page_bytes((8 + i) * 4), indexer.page_bytes(i * 4))
        assert np.array_equal(dst_kv.page_bytes((8 + i) * 4), kv.page_bytes(i * 4))
    a.close()
    b.close()


def test_mla_rank_other_than_0_skips_kv_but_writes_its_mamba_state(sglang, store_dir):
    config = storage_config(mla=True, tp_rank=1, tp_size=2, layout="page_first_direct")
    kv = HostPool(layout="page_first_direct", mla=True, backing="torch")
    mamba = MambaPoolHost()
    mamba.fill_random(seed=50)
    a = make(sglang, store_dir, kv, config)
    a.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    keys = keys_for("mla-mamba", 2)
    assert a.batch_set_v1(keys, host_indices([0, 1], kv.page_size)) == [True, True]
    assert a.batch_exists(keys) == 0  # rank 0 writes the KV
    t = PoolTransfer(name=PoolName.MAMBA, host_indices=idx([4]), keys=keys[-1:])
    assert a.batch_set_v2([t]) == {PoolName.MAMBA: [True]}
    assert a.counters()["pools"]["mamba"]["put_pages"] == 1
    # Rank 1's state is rank 1's: rank 0 has its own namespace for it.
    other = MambaPoolHost()
    b = make(sglang, store_dir, HostPool(layout="page_first_direct", mla=True,
                                         backing="torch"),
             storage_config(mla=True, tp_rank=0, tp_size=2, layout="page_first_direct"))
    b.register_mem_host_pool_v2(other, PoolName.MAMBA)
    assert b.batch_get_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=idx([2]),
                                        keys=keys[-1:])]) == {PoolName.MAMBA: [False]}
    c = make(sglang, store_dir, HostPool(layout="page_first_direct", mla=True,
                                         backing="torch"), config)
    c.register_mem_host_pool_v2(other, PoolName.MAMBA)
    assert c.batch_get_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=idx([2]),
                                        keys=keys[-1:])]) == {PoolName.MAMBA: [True]}
    assert np.array_equal(other.page_bytes(2), mamba.page_bytes(4))
    for x in (a, b, c):
        x.close()


def test_mla_rank_other_than_0_writes_the_side_pools_sglang_asks_it_to(sglang, store_dir):
    # SGLang skips the KV backup on MLA ranks other than 0, but not the side pools': a page
    # such a rank is asked to store is stored by it, not taken on trust from rank 0.
    layout = "page_first_direct"
    kv = HostPool(layout=layout, mla=True, backing="torch", tokens=64)
    indexer = IndexerPoolHost(kv)
    indexer.fill_random(seed=45)
    one = make(sglang, store_dir, kv, storage_config(mla=True, tp_rank=1, tp_size=2,
                                                      layout=layout))
    one.register_mem_host_pool_v2(indexer, PoolName.INDEXER)
    keys = keys_for("mla-side", 3)
    kvi = host_indices(range(3), kv.page_size)
    assert one.batch_set_v2([PoolTransfer(name=PoolName.INDEXER, host_indices=kvi,
                                          keys=keys)]) == {PoolName.INDEXER: [True] * 3}
    assert one.counters()["pools"]["indexer"]["put_pages"] == 3
    # Rank 0 (which wrote nothing) reads them from the shared namespace.
    dst_kv = HostPool(layout=layout, mla=True, backing="torch", tokens=64)
    dst_ix = IndexerPoolHost(dst_kv)
    zero = make(sglang, store_dir, dst_kv, storage_config(mla=True, tp_rank=0, tp_size=2,
                                                          layout=layout))
    zero.register_mem_host_pool_v2(dst_ix, PoolName.INDEXER)
    got = zero.batch_get_v2([PoolTransfer(name=PoolName.INDEXER,
                                          host_indices=host_indices(range(8, 11), kv.page_size),
                                          keys=keys)])
    assert got == {PoolName.INDEXER: [True] * 3}
    for i in range(3):
        assert np.array_equal(dst_ix.page_bytes((8 + i) * 4), indexer.page_bytes(i * 4))
    one.close()
    zero.close()


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_deepseek_v4_group_with_a_logical_anchor(sglang, store_dir, layout):
    anchor = LogicalAnchor(tokens=64, page_size=4, layout=layout)
    c4 = IndexerPoolHost(anchor, layers=2, page_stride=24)
    c128 = IndexerPoolHost(anchor, layers=1, page_stride=8)
    c4.fill_random(60)
    c128.fill_random(61)
    group = HostPoolGroup([PoolEntry(PoolName.KV, anchor, is_primary_index_anchor=True),
                           PoolEntry(PoolName.DEEPSEEK_V4_C4, c4),
                           PoolEntry(PoolName.DEEPSEEK_V4_C128, c128)])
    config = storage_config(mla=True, layout=layout)
    a = make(sglang, store_dir, group, config)
    for e in group.entries:
        a.register_mem_host_pool_v2(e.host_pool, e.name)
    keys = keys_for("v4", 5)
    kvi = host_indices(range(5), 4)
    side = [PoolTransfer(name=PoolName.DEEPSEEK_V4_C4, host_indices=kvi, keys=keys),
            PoolTransfer(name=PoolName.DEEPSEEK_V4_C128, host_indices=kvi, keys=keys)]
    results, done = Driver(a, 4).backup(keys, kvi, side)
    assert done == 5 and all(all(v) for v in results.values())

    anchor2 = LogicalAnchor(tokens=64, page_size=4, layout=layout)
    d4, d128 = IndexerPoolHost(anchor2, layers=2, page_stride=24), \
        IndexerPoolHost(anchor2, layers=1, page_stride=8)
    group2 = HostPoolGroup([PoolEntry(PoolName.KV, anchor2, is_primary_index_anchor=True),
                            PoolEntry(PoolName.DEEPSEEK_V4_C4, d4),
                            PoolEntry(PoolName.DEEPSEEK_V4_C128, d128)])
    b = make(sglang, store_dir, group2, storage_config(mla=True, tp_rank=1, tp_size=2,
                                                       layout=layout))
    for e in group2.entries:
        b.register_mem_host_pool_v2(e.host_pool, e.name)
    dst = host_indices(range(8, 13), 4)
    side = [PoolTransfer(name=PoolName.DEEPSEEK_V4_C4, host_indices=dst, keys=keys),
            PoolTransfer(name=PoolName.DEEPSEEK_V4_C128, host_indices=dst, keys=keys)]
    assert b.batch_exists_v2(keys, side).kv_hit_pages == 5
    assert b.batch_get_v1(keys, dst) == [True] * 5  # the anchor answers True
    assert b.batch_get_v2(side) == {PoolName.DEEPSEEK_V4_C4: [True] * 5,
                                    PoolName.DEEPSEEK_V4_C128: [True] * 5}
    for i in range(5):
        assert np.array_equal(d4.page_bytes((8 + i) * 4), c4.page_bytes(i * 4))
        assert np.array_equal(d128.page_bytes((8 + i) * 4), c128.page_bytes(i * 4))
    a.close()
    b.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_swa_hybrid_every_layout(sglang, store_dir, layout):
    """A sliding-window model: full-attention KV plus an SWA pool of the same layout whose
    last two pages are what a prefix needs."""
    def server(seed):
        kv = HostPool(layout=layout, backing="torch", tokens=64)
        swa = HostPool(layout=layout, backing="torch", tokens=32, layers=2, heads=1)
        if seed is not None:
            kv.fill_random(seed)
            swa.fill_random(seed + 1)
        group = HostPoolGroup([PoolEntry(PoolName.KV, kv, True), PoolEntry(PoolName.SWA, swa)])
        b = make(sglang, store_dir, group, storage_config(layout=layout))
        for e in group.entries:
            b.register_mem_host_pool_v2(e.host_pool, e.name)
        return kv, swa, b

    kv, swa, a = server(160)
    keys = keys_for(f"swa-{layout}", 5)
    side = [PoolTransfer(name=PoolName.SWA, host_indices=host_indices([1, 2], 4),
                         keys=keys[3:], hit_policy=TRAILING)]
    assert Driver(a, 4).backup(keys, host_indices(range(5), 4), side) == \
        ({PoolName.SWA: [True, True]}, 5)
    kv2, swa2, b = server(None)
    side = [PoolTransfer(name=PoolName.SWA, host_indices=host_indices([5, 6], 4),
                         keys=placeholder_keys(2), hit_policy=TRAILING)]
    assert Driver(b, 4).prefetch(keys, host_indices(range(8, 13), 4), side) == \
        (5, 5, {PoolName.SWA: 2})
    for i in range(5):
        assert np.array_equal(kv2.page_bytes((8 + i) * 4), kv.page_bytes(i * 4))
    for s_, d in ((1, 5), (2, 6)):
        assert np.array_equal(swa2.page_bytes(d * 4), swa.page_bytes(s_ * 4))
    a.close()
    b.close()


# -- less work per call ---------------------------------------------------------------------

def test_pages_already_present_are_not_rewritten(sglang, store_dir):
    pool = HostPool(backing="torch")
    pool.fill_random(seed=90)
    a = make(sglang, store_dir, pool)
    b = make(sglang, store_dir, HostPool(backing="torch"))  # a DP replica of the same shard
    keys = keys_for("dup", 6)
    assert a.batch_set_v1(keys[:4], host_indices(range(4), 4)) == [True] * 4
    assert b.batch_set_v1(keys, host_indices(range(6), 4)) == [True] * 6
    assert b.counters()["set_present"] == 4
    assert b.counters()["store"]["put_pages"] == 2
    mamba = MambaPoolHost()
    a.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    t = PoolTransfer(name=PoolName.MAMBA, host_indices=idx([3]), keys=keys[-1:])
    assert a.batch_set_v2([t]) == a.batch_set_v2([t]) == {PoolName.MAMBA: [True]}
    assert a.counters()["pools"]["mamba"]["put_pages"] == 1
    a.close()
    b.close()


@pytest.mark.parametrize("file_layout", ["files", "segments"])
def test_pages_batch_exists_v2_found_are_read_without_asking_the_index_again(
        sglang, store_dir, file_layout):
    src = Hybrid(sglang, store_dir, seed=95, file_layout=file_layout)
    keys = keys_for("found", 8)
    src.driver.backup(keys, src.kv_idx(range(8)), src.side(keys, 2, [0, 1]))
    dst = Hybrid(sglang, store_dir, file_layout=file_layout)
    pools = dst.backend._pools

    def exists_queries():
        return sum(pools[n].stores[0].stats()["exists_queries"] for n in ("mamba", "swa"))

    side = dst.side(keys, 7, [4, 5], placeholder=True)
    assert dst.backend.batch_exists_v2(keys, side).kv_hit_pages == 8
    asked = exists_queries()
    side[0].keys, side[1].keys = keys[-1:], keys[-2:]
    assert dst.backend.batch_get_v2(side) == {PoolName.MAMBA: [True], PoolName.SWA: [True, True]}
    assert exists_queries() == asked
    assert np.array_equal(dst.mamba.page_bytes(7), src.mamba.page_bytes(2))
    for s_, d in ((0, 4), (1, 5)):
        assert np.array_equal(dst.swa.page_bytes(d * 4), src.swa.page_bytes(s_ * 4))
    # A page removed between the two calls reads as a miss, never as other bytes; the
    # pages after it are False too (the leading run).
    side = dst.side(keys, 8, [6, 7], placeholder=True)
    assert dst.backend.batch_exists_v2(keys, side).kv_hit_pages == 8
    src.backend._pools["swa"].stores[0].remove(keys[-2])
    side[0].keys, side[1].keys = keys[-1:], keys[-2:]
    got = dst.backend.batch_get_v2(side)
    if file_layout == "files" or not got[PoolName.SWA][0]:
        assert got == {PoolName.MAMBA: [True], PoolName.SWA: [False, False]}
        assert not dst.swa.page_bytes(6 * 4).any()
    else:
        # Segments: the removal is an entry in the other store's summary, seen at this
        # store's next refresh; until then the record reads as the key's own bytes.
        assert got == {PoolName.MAMBA: [True], PoolName.SWA: [True, True]}
        assert np.array_equal(dst.swa.page_bytes(6 * 4), src.swa.page_bytes(0))
    # Keys batch_exists_v2 did not find are looked up first, as before.
    other = [PoolTransfer(name=PoolName.SWA, host_indices=dst.swa_idx([8, 9]),
                          keys=keys_for("never", 2))]
    assert dst.backend.batch_get_v2(other) == {PoolName.SWA: [False, False]}
    assert dst.backend.counters()["get_not_read"] >= 2
    src.close()
    dst.close()


# -- clear ----------------------------------------------------------------------------------

def _clear_in_child(store_dir, done):
    pool = HostPool(backing="numpy")
    a = adapter_module.HiCacheKvtier(storage_config(), {"uri": f"file://{store_dir}"})
    a.register_mem_pool_host(pool)
    done.put(a.clear())
    a.close()


def test_clear_is_seen_by_every_instance_at_once(sglang, store_dir):
    pool = HostPool()
    pool.fill_random(seed=100)
    a = make(sglang, store_dir, pool)
    b = make(sglang, store_dir, HostPool())
    keys = keys_for("clr", 4)
    assert a.batch_set_v1(keys, host_indices(range(4), 4)) == [True] * 4
    assert b.batch_exists(keys) == 4
    assert a.clear()
    assert b.batch_exists(keys) == 0 and not b.exists(keys[0])
    # Another process clears: this one's next call sees it.
    assert a.batch_set_v1(keys, host_indices(range(4), 4)) == [True] * 4
    assert b.batch_exists(keys) == 4
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Queue()
    child = ctx.Process(target=_clear_in_child, args=(store_dir, done))
    child.start()
    assert done.get(timeout=120) is True
    child.join(60)
    assert b.batch_exists(keys) == 0 and a.batch_exists(keys) == 0
    a.close()
    b.close()


# -- metrics --------------------------------------------------------------------------------

def test_get_stats_is_sglangs_storage_metrics(sglang, store_dir):
    assert issubclass(sglang.HiCacheKvtier, __import__(
        "sglang.srt.mem_cache.hicache_storage", fromlist=["x"]).HiCacheStorage)
    pool = HostPool()
    pool.fill_random(seed=110)
    a = make(sglang, store_dir, pool, storage_config(metrics=True))
    keys = keys_for("m", 3)
    a.batch_set_v1(keys, host_indices(range(3), 4))
    a.batch_get_v1(keys, host_indices(range(3, 6), 4))
    m = a.get_stats()
    log_storage_metrics(m)  # the collector's isinstance check
    assert type(m) is StorageMetrics and m.backup_pgs == [3] and m.prefetch_pgs == [3]
    m.prefetch_stats = {"assigned": "by the radix cache"}
    assert a.get_stats().backup_pgs == []
    assert "kvtier_put_pages_total" in a.prometheus()
    a.close()


def test_get_stats_without_sglang_is_none(store_dir):
    a = adapter_module.HiCacheKvtier(storage_config(metrics=True), {"uri": store_dir})
    a.register_mem_pool_host(HostPool())
    assert a.get_stats() is None
    a.close()


# -- bad input never raises -----------------------------------------------------------------

def test_bad_input_is_false_with_a_counter_never_an_exception(sglang, store_dir, caplog):
    pool = HostPool(backing="torch")
    pool.fill_random(seed=120)
    a = make(sglang, store_dir, pool)
    mamba = MambaPoolHost()
    a.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    keys = keys_for("bad", 3)
    good = host_indices(range(3), 4)
    with caplog.at_level(logging.WARNING, logger=sglang.__name__):
        assert a.batch_set_v1(keys, None) == [False] * 3
        assert a.batch_set_v1(keys, good[:-1]) == [False] * 3  # keys and indices disagree
        assert a.batch_get_v1(keys, host_indices(range(4), 4)) == [False] * 3
        assert a.batch_set_v1([None, 5, keys[0]], good) == [False] * 3
        assert a.batch_set_v2([PoolTransfer(name="nope", host_indices=good, keys=keys)]) == \
            {"nope": [False] * 3}
        assert a.batch_get_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=None,
                                            keys=keys[:1])]) == {PoolName.MAMBA: [False]}
        assert a.batch_get_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=idx([0, 1]),
                                            keys=keys[:1])]) == {PoolName.MAMBA: [False]}
        assert a.batch_set_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=idx([0]),
                                            keys=None)]) == {PoolName.MAMBA: []}
        assert a.batch_set_v2(None) == {} and a.batch_get_v2([]) == {}
        assert a.batch_exists_v2(keys, [PoolTransfer(name="nope", keys=keys)]).kv_hit_pages \
            == 0
        assert a.batch_exists_v2(None, None).kv_hit_pages == 0
        assert a.batch_set(keys, [pool.get_data_page(0)]) is False  # lists disagree
        assert a.get(keys[0], 12345) is None  # an address without a size
    c = a.counters()
    assert c["unknown_pool"] >= 2 and c["errors"] >= 6
    assert c["store"]["put_pages"] == 0
    assert len(caplog.records) < 15  # rate-limited
    a.close()
    # After close every call answers as a miss.
    assert a.batch_get_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=idx([0]),
                                        keys=keys[:1])]) == {PoolName.MAMBA: [False]}
    assert a.batch_exists_v2(keys, []).kv_hit_pages == 0


# -- resources and threads ------------------------------------------------------------------

def test_fd_count_stays_flat_over_mixed_hybrid_calls(sglang, store_dir):
    before = open_fds()
    h = Hybrid(sglang, store_dir, seed=130)
    keys = keys_for("fd", 8)
    draft = HostPool(backing="torch", layers=1)
    steps = [
        lambda n: h.driver.backup(keys[:n], h.kv_idx(range(n)), h.side(keys[:n], 2, [0, 1])),
        lambda n: h.driver.prefetch(keys, h.kv_idx(range(8, 16)),
                                    h.side(keys, 3, [2, 3], placeholder=True)),
        lambda n: h.backend.batch_get_v1(keys_for("absent", 2), h.kv_idx([0, 1])),
        lambda n: h.backend.batch_set([keys[n - 1] + ".draft"], [draft.get_data_page(0)]),
        lambda n: h.backend.batch_get([keys[n - 1] + ".draft"],
                                      [draft.get_dummy_flat_data_page()]),
        lambda n: h.backend.batch_set_v2([PoolTransfer(name="nope", keys=keys)]),
        lambda n: h.backend.get_stats(),
        lambda n: n == 8 and h.backend.clear(),
    ]
    for step in steps:  # the draft namespace opens on first use
        step(8)
    steady = open_fds()
    for round_ in range(40):
        for step in steps:
            step(2 + round_ % 7)
        assert open_fds() == steady
    h.close()
    assert open_fds() == before


def test_prefetch_and_backup_threads_at_once(sglang, store_dir):
    h = Hybrid(sglang, store_dir, seed=140)

    # Backup stores 6,000 batches (about a second here); prefetch runs until it is done, then
    # once more over the 8 key sets, which then all hit (the last assertion compares a page
    # those rounds load).
    def backup(n):
        keys = keys_for(f"thr{n % 8}", 6)
        res, done = h.driver.backup(keys, h.kv_idx(range(6)), h.side(keys, 1, [0, 1]))
        ok = done == 6 and all(all(v) for v in res.values())
        return None if ok else ("backup", res, done)

    def prefetch(n):
        keys = keys_for(f"thr{n % 8}", 6)
        hit, loaded, hits = h.driver.prefetch(keys, h.kv_idx(range(16, 22)),
                                              h.side(keys, 9, [8, 9], placeholder=True))
        if loaded != hit or (hit == 6 and hits != {PoolName.MAMBA: 1, PoolName.SWA: 2}):
            return ("prefetch", hit, loaded, hits)
        return None

    errors = writer_and_reader(backup, prefetch, writes=6000, last_rounds=8)
    assert not errors, errors[:3]
    assert h.backend.counters()["errors"] == 0
    assert np.array_equal(h.mamba.page_bytes(9), h.mamba.page_bytes(1))
    h.close()


# -- the real SGLang ------------------------------------------------------------------------

def test_against_real_sglang(store_dir):
    try:
        from sglang.srt.mem_cache import hicache_storage as real
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the sglang package is not importable here ({type(exc).__name__}: "
                    f"{exc}); the fakes stand in for it in the tests above")
    module = importlib.reload(adapter_module)
    assert issubclass(module.HiCacheKvtier, real.HiCacheStorage)
    pool = HostPool(backing="torch", layout="page_first_direct")
    pool.fill_random(seed=150)
    config = real.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=True, is_page_first_layout=False,
        model_name="test-model", extra_config={"uri": f"file://{store_dir}"})
    a = module.HiCacheKvtier(config, {})
    a.register_mem_pool_host(pool)
    mamba = MambaPoolHost()
    mamba.fill_random(151)
    a.register_mem_host_pool_v2(mamba, real.PoolName.MAMBA)
    keys = keys_for("real", 4)
    trailing = real.PoolHitPolicy.TRAILING_PAGES
    side = [real.PoolTransfer(name=real.PoolName.MAMBA, host_indices=idx([2]),
                              keys=keys[-1:], hit_policy=trailing)]
    assert Driver(a, 4).backup(keys, host_indices(range(4), 4), side) == \
        ({real.PoolName.MAMBA: [True]}, 4)
    dst_mamba = MambaPoolHost()
    b_pool = HostPool(backing="torch", layout="page_first_direct")
    b = module.HiCacheKvtier(config, {})
    b.register_mem_pool_host(b_pool)
    b.register_mem_host_pool_v2(dst_mamba, real.PoolName.MAMBA)
    side = [real.PoolTransfer(name=real.PoolName.MAMBA, host_indices=idx([6]),
                              keys=["__placeholder__"], hit_policy=trailing)]
    result = b.batch_exists_v2(keys, side)
    assert isinstance(result, real.PoolTransferResult) and result.kv_hit_pages == 4
    assert Driver(b, 4).prefetch(keys, host_indices(range(8, 12), 4), side) == \
        (4, 4, {real.PoolName.MAMBA: 1})
    assert np.array_equal(dst_mamba.page_bytes(6), mamba.page_bytes(2))
    for i in range(4):
        assert np.array_equal(b_pool.page_bytes((8 + i) * 4), pool.page_bytes(i * 4))
    assert a.get_stats() is not None
    b.close()
    a.close()
    importlib.reload(adapter_module)
