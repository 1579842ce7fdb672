"""kvtier.sglang.HiCacheKvtier on the memory of SGLang's host pools, driven the way SGLang's
current HiCache drives it: every host layout zero-copy (and the one it refuses), page addresses
learnt at registration or asked per call, heads kept per TP rank and split between TP sizes,
and draft pages in a namespace of their own.

The fakes (sglang_fakes.py) are written from SGLang's code and cite the files they mirror."""

import numpy as np
import pytest
import torch

from fakes import LAYOUTS, MLA_LAYOUTS, HostPool, host_indices
from sglang_fakes import keys_for, make, storage_config


# -- every layout, zero-copy ----------------------------------------------------------------

@pytest.mark.parametrize("mla,layout", [(False, lay) for lay in LAYOUTS] +
                         [(True, lay) for lay in MLA_LAYOUTS],
                         ids=[f"mha-{lay}" for lay in LAYOUTS] +
                         [f"mla-{lay}" for lay in MLA_LAYOUTS])
def test_every_layout_is_zero_copy(sglang, store_dir, mla, layout):
    src = HostPool(layout=layout, mla=mla, backing="torch")
    src.fill_random(seed=3)

    def no_copies(*args, **kwargs):
        raise AssertionError("a flat page copy on the zero-copy path")

    a = make(sglang, store_dir, src, storage_config(layout=layout, mla=mla))
    src.get_data_page = src.set_from_flat_data_page = no_copies
    keys = keys_for(f"zc-{layout}", 5)
    assert a.batch_set_v1(keys, host_indices([1, 2, 5, 7, 9], src.page_size)) == [True] * 5
    dst = HostPool(layout=layout, mla=mla, backing="torch")
    b = make(sglang, store_dir, dst, storage_config(layout=layout, mla=mla))
    dst.set_from_flat_data_page = no_copies
    assert b.batch_get_v1(keys, host_indices([0, 3, 4, 6, 8], dst.page_size)) == [True] * 5
    for pool in (src, dst):
        pool.__dict__.pop("get_data_page", None)
        pool.__dict__.pop("set_from_flat_data_page", None)
    for s, d in zip([1, 2, 5, 7, 9], [0, 3, 4, 6, 8]):
        assert np.array_equal(dst.page_bytes(d * dst.page_size),
                              src.page_bytes(s * src.page_size))
    a.close()
    b.close()


def test_page_first_kv_split_is_refused_at_registration(sglang, store_dir):
    pool = HostPool(layout="page_first_kv_split", mla=True, backing="torch")
    a = sglang.HiCacheKvtier(storage_config(layout="page_first_kv_split", mla=True),
                             {"uri": store_dir})
    with pytest.raises(ValueError, match="page_first_kv_split"):
        a.register_mem_pool_host(pool)
    a.close()


# -- page addresses: one stride, or asked per call ------------------------------------------

class ScatteredPool(HostPool):
    """A pool whose page p lives in slot 5p mod pages: its pages are not at one stride, so
    the adapter asks the pool where they are on every call."""

    def slot(self, start):
        pages = self.size // self.page_size
        return (start // self.page_size * 5) % pages * self.page_size

    def get_page_buffer_meta(self, indices):
        ps = self.page_size
        moved = [self.slot(i - i % ps) + i % ps for i in indices.tolist()]
        return super().get_page_buffer_meta(torch.tensor(moved, dtype=torch.int64))


@pytest.mark.parametrize("scattered", [False, True], ids=["one-stride", "scattered"])
def test_page_addresses_learnt_at_registration_or_asked_per_call(sglang, store_dir, scattered):
    cls = ScatteredPool if scattered else HostPool
    src = cls(layout="page_first_direct", backing="torch")
    src.fill_random(seed=97)
    a = make(sglang, store_dir, src)
    assert (a._kv.geometry is None) == scattered
    keys = keys_for(f"geometry-{scattered}", 4)
    assert a.batch_set_v1(keys, host_indices(range(4), 4)) == [True] * 4
    dst = cls(layout="page_first_direct", backing="torch")
    b = make(sglang, store_dir, dst)
    assert b.batch_get_v1(keys, host_indices(range(8, 12), 4)) == [True] * 4
    move = dst.slot if scattered else (lambda start: start)
    for i in range(4):
        assert np.array_equal(dst.page_bytes(move((8 + i) * 4)), src.page_bytes(move(i * 4)))
    if not scattered:
        # Indices past the pool are not turned into addresses: the pool is asked (and this
        # one points past its memory, which the store refuses to read into).
        assert b.batch_get_v1(keys[:1], host_indices([16], 4)) == [False]
    a.close()
    b.close()


# -- heads kept per TP rank, and split between TP sizes -------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_gqa_tp_ranks_keep_their_own_heads(sglang, store_dir, layout):
    """Two TP ranks of a GQA model store different heads under the same keys."""
    keys = keys_for(f"gqa-{layout}", 3)
    pools = []
    for rank in (0, 1):
        pool = HostPool(layout=layout, backing="torch", heads=2)
        pool.fill_random(170 + rank)
        a = make(sglang, store_dir, pool, storage_config(layout=layout, tp_rank=rank,
                                                          tp_size=2))
        assert a.batch_set_v1(keys, host_indices(range(3), 4)) == [True] * 3
        pools.append(pool)
        a.close()
    for rank in (0, 1):
        dst = HostPool(layout=layout, backing="torch", heads=2)
        b = make(sglang, store_dir, dst, storage_config(layout=layout, tp_rank=rank,
                                                         tp_size=2))
        assert b.batch_get_v1(keys, host_indices(range(4, 7), 4)) == [True] * 3
        for i in range(3):
            assert np.array_equal(dst.page_bytes((4 + i) * 4), pools[rank].page_bytes(i * 4))
        b.close()


def head_pool(heads, seed=None):
    pool = HostPool(layout="page_head", backing="torch", heads=heads, tokens=32, page_size=4)
    if seed is not None:
        pool.fill_random(seed)
    return pool


def test_tp4_and_tp8_share_pages_head_by_head(sglang, store_dir):
    """TP=4 rank 1 holds heads 4..7 of 16; TP=8 ranks 2 and 3 hold heads 4..5 and 6..7."""
    keys = keys_for("split", 3)
    tp4 = head_pool(4, seed=70)
    w = make(sglang, store_dir, tp4, storage_config(layout="page_head", tp_rank=1, tp_size=4,
                                                     tp_lcm_size=8))
    assert w._kv.split == 2
    assert w.batch_set_v1(keys, host_indices([0, 1, 2], 4)) == [True] * 3
    for rank, first in ((2, 0), (3, 2)):
        pool = head_pool(2)
        r = make(sglang, store_dir, pool, storage_config(layout="page_head", tp_rank=rank,
                                                          tp_size=8, tp_lcm_size=8))
        assert r.batch_exists(keys) == 3
        assert r.batch_get_v1(keys, host_indices([5, 6, 7], 4)) == [True] * 3
        for s, d in zip([0, 1, 2], [5, 6, 7]):
            assert np.array_equal(pool.head_bytes(d * 4, 0, 2), tp4.head_bytes(s * 4, first, 2))
        r.close()
    # The reverse: TP=8 ranks 2 and 3 write, TP=4 rank 1 reads both halves.
    keys2 = keys_for("split-back", 2)
    halves = []
    for rank in (2, 3):
        pool = head_pool(2, seed=71 + rank)
        x = make(sglang, store_dir, pool, storage_config(layout="page_head", tp_rank=rank,
                                                          tp_size=8, tp_lcm_size=8))
        if rank == 2:
            # Half the heads are not a page: TP=4 sees nothing until both halves are there.
            assert x.batch_set_v1(keys2, host_indices([0, 1], 4)) == [True, True]
            assert w.batch_exists(keys2) == 0
        else:
            assert x.batch_set_v1(keys2, host_indices([0, 1], 4)) == [True, True]
        halves.append(pool)
        x.close()
    reader = head_pool(4)
    r4 = make(sglang, store_dir, reader, storage_config(layout="page_head", tp_rank=1,
                                                         tp_size=4, tp_lcm_size=8))
    assert r4.batch_get_v1(keys2, host_indices([3, 4], 4)) == [True, True]
    for s, d in zip([0, 1], [3, 4]):
        assert np.array_equal(reader.head_bytes(d * 4, 0, 2), halves[0].head_bytes(s * 4, 0, 2))
        assert np.array_equal(reader.head_bytes(d * 4, 2, 2), halves[1].head_bytes(s * 4, 0, 2))
    # Never shared otherwise: TP=4 without tp_lcm_size, or another layout.
    plain = make(sglang, store_dir, head_pool(4), storage_config(layout="page_head",
                                                                  tp_rank=1, tp_size=4))
    assert plain.batch_exists(keys) == 0 and plain.batch_exists(keys2) == 0
    other = make(sglang, store_dir, HostPool(layout="page_first", backing="torch", heads=2,
                                             tokens=32, page_size=4),
                 storage_config(layout="page_first", tp_rank=2, tp_size=8, tp_lcm_size=8))
    assert other.batch_exists(keys) == 0
    for x in (w, r4, plain, other):
        x.close()


# -- draft pages ----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_draft_pages_round_trip_in_their_own_namespace(sglang, store_dir, layout):
    kv = HostPool(backing="torch", layers=3, layout=layout)
    kv.fill_random(seed=80)
    draft = HostPool(backing="torch", layers=1, layout=layout)
    draft.fill_random(seed=81)
    a = make(sglang, store_dir, kv)
    keys = keys_for(f"spec-{layout}", 4)
    dkeys = [k + ".draft" for k in keys]
    # The controller's generic path: draft pool pages, the draft pool's own size.
    values = [draft.get_data_page(p * draft.page_size, flat=True) for p in range(4)]
    assert a.batch_set(dkeys, values)
    assert a.exists(dkeys[0]) and a.batch_exists(keys) == 0
    dst = HostPool(backing="torch", layers=1, layout=layout)
    b = make(sglang, store_dir, HostPool(backing="torch", layers=3, layout=layout))
    targets = [dst.get_dummy_flat_data_page() for _ in range(4)]
    got = b.batch_get(dkeys, targets)
    assert all(g is t for g, t in zip(got, targets))
    for p, t in enumerate(targets):
        assert torch.equal(t.view(torch.uint8), values[p].view(torch.uint8))
    # A page of the draft's size under a plain key is a draft page too; the KV size is not.
    assert a.set(keys[0], values[0]) and b.get(keys[0], dst.get_dummy_flat_data_page()) \
        is not None
    assert b.batch_exists(keys) == 0
    assert b.get(keys_for("absent", 1)[0] + ".draft", targets[0]) is None
    assert a.counters()["draft_pages"] == 5
    a.close()
    b.close()
