"""kvtier.sglang.HiCacheKvtier against fakes of SGLang's storage config and host pool."""

import hashlib
import logging
import os
import shutil
import time

import numpy as np
import pytest
import torch

import kvtier
from conftest import du, open_fds, s3_test_server, writer_and_reader
from fakes import LAYOUTS, MLA_LAYOUTS, HostPool, OldStorageConfig, StorageConfig, host_indices
from kvtier.sglang import HiCacheKvtier


def keys_for(prefix, n):
    """SGLang-style keys: 64 hex digits (a SHA-256), distinct per (prefix, i)."""
    return [hashlib.sha256(f"{prefix}/{i}".encode()).hexdigest() for i in range(n)]


def adapter(store_dir, pool, config=None, **options):
    config = config or StorageConfig()
    options.setdefault("uri", f"file://{store_dir}")
    backend = HiCacheKvtier(config, options)
    backend.register_mem_pool_host(pool)
    return backend


def page_object_bytes(store_dir):
    """What a page file of HostPool()'s pages is charged against a capacity: a 4 KiB header
    block, then the payload padded to 4 KiB, and its directory entry."""
    probe = adapter(store_dir + "-probe", HostPool())
    try:
        return kvtier.capacity_page_bytes(probe.page_bytes + 4096 + (-probe.page_bytes) % 4096)
    finally:
        probe.close()


def pool_pages(pool):
    return pool.size // pool.page_size


# -- byte-exact round trips through every layout ------------------------------------------

@pytest.mark.parametrize("backing", ["numpy", "torch"])
@pytest.mark.parametrize("mla,layout", [(False, lay) for lay in LAYOUTS] +
                         [(True, lay) for lay in MLA_LAYOUTS],
                         ids=[f"mha-{lay}" for lay in LAYOUTS] +
                         [f"mla-{lay}" for lay in MLA_LAYOUTS])
def test_roundtrip_every_layout(store_dir, backing, mla, layout):
    src = HostPool(layout=layout, mla=mla, backing=backing)
    src.fill_random(seed=7)
    writer = adapter(store_dir, src)
    keys = keys_for("rt", 6)
    pages = [1, 3, 4, 7, 8, 15]
    assert writer.batch_set_v1(keys, host_indices(pages, src.page_size)) == [True] * 6
    expected = [src.page_bytes(p * src.page_size) for p in pages]

    # A fresh server process: another pool, the pages land in other slots.
    dst = HostPool(layout=layout, mla=mla, backing=backing)
    reader = adapter(store_dir, dst)
    assert reader.batch_exists(keys) == 6
    slots = [0, 2, 5, 9, 10, 11]
    assert reader.batch_get_v1(keys, host_indices(slots, dst.page_size)) == [True] * 6
    for slot, want in zip(slots, expected):
        assert np.array_equal(dst.page_bytes(slot * dst.page_size), want)
    untouched = [s for s in range(pool_pages(dst)) if s not in slots]
    for slot in untouched:
        assert not dst.page_bytes(slot * dst.page_size).any()
    writer.close()
    reader.close()


def page_files(directory):
    """Files named like a page (32 hex digits) under `directory`."""
    return [f for _, _, files in os.walk(directory) for f in files
            if len(f) == 32 and all(c in "0123456789abcdef" for c in f)]


def test_small_pages_get_segments_with_only_a_uri(store_dir, caplog):
    pool = HostPool(tokens=256)
    pool.fill_random(seed=31)
    with caplog.at_level(logging.INFO, logger="kvtier.sglang"):
        a = adapter(store_dir, pool)
    layout = a.counters()["store"]["layout"]
    assert layout == f"segments (auto: pages of {a.page_bytes} B, below 4 MiB)"
    assert any(f"layout {layout}" in r.getMessage() for r in caplog.records)
    keys = keys_for("seg", 16)
    assert a.batch_set_v1(keys, host_indices(range(16), pool.page_size)) == [True] * 16
    assert a.batch_get_v1(keys, host_indices(range(32, 48), pool.page_size)) == [True] * 16
    for i in range(16):
        assert np.array_equal(pool.page_bytes(i * pool.page_size),
                              pool.page_bytes((32 + i) * pool.page_size))
    assert page_files(store_dir) == []  # no file per page
    a.close()


def test_a_store_of_page_files_keeps_its_layout(store_dir):
    pool = HostPool(tokens=128)
    pool.fill_random(seed=32)
    keys = keys_for("held", 4)
    a = adapter(store_dir, pool, file_layout="files")
    assert a.batch_set_v1(keys, host_indices(range(4), pool.page_size)) == [True] * 4
    a.close()
    assert len(page_files(store_dir)) == 4
    b = adapter(store_dir, pool)  # only the uri: auto keeps what the namespace holds
    assert b.counters()["store"]["layout"] == \
        "files (auto: the namespace already holds page files)"
    assert b.batch_get_v1(keys, host_indices(range(8, 12), pool.page_size)) == [True] * 4
    for i in range(4):
        assert np.array_equal(pool.page_bytes(i * pool.page_size),
                              pool.page_bytes((8 + i) * pool.page_size))
    b.close()


def test_old_storage_config_shape(store_dir):
    pool = HostPool()
    pool.fill_random(seed=1)
    old = OldStorageConfig(tp_rank=0, tp_size=1, is_mla_model=False, is_page_first_layout=True,
                           model_name="test-model",
                           extra_config={"uri": f"file://{store_dir}"})
    a = HiCacheKvtier(old, {})
    a.register_mem_pool_host(pool)
    keys = keys_for("old", 2)
    assert a.batch_set_v1(keys, host_indices([0, 1], pool.page_size)) == [True, True]
    # A new-shape config with the same shard reads the same pages.
    b = adapter(store_dir, HostPool())
    assert b.batch_exists(keys) == 2
    a.close()
    b.close()


# -- the NIXL backend's regression cases, for kvtier ------------------------------------

def test_single_set_get(store_dir):
    pool = HostPool(backing="torch", dtype=torch.float32)
    pool.fill_random(seed=2)
    a = adapter(store_dir, pool)
    key = keys_for("single", 1)[0]
    value = pool.get_data_page(0, flat=True).clone()
    assert a.set(key, value)
    assert a.exists(key)
    target = torch.zeros_like(value)
    got = a.get(key, target)
    assert got is target
    assert torch.equal(target.view(torch.uint8), value.view(torch.uint8))
    assert a.get(keys_for("absent", 1)[0], torch.zeros_like(value)) is None
    fresh = a.get(key)  # no target: a new flat page
    assert torch.equal(fresh.view(torch.uint8), value.view(torch.uint8))
    a.close()


def test_legacy_calls_leave_the_zero_copy_path_alone(store_dir):
    """A legacy call with memory outside the pool stages through its own row; v1 batches on a
    page_first pool stay zero-copy (they never call get_data_page)."""
    pool = HostPool(backing="torch", dtype=torch.float32)
    pool.fill_random(seed=19)
    a = adapter(store_dir, pool)
    key = keys_for("legacy-then-v1", 1)[0]
    assert a.set(key, pool.get_data_page(0, flat=True).clone())
    calls = []
    get_page, set_page = pool.get_data_page, pool.set_from_flat_data_page
    pool.get_data_page = lambda *args, **kw: calls.append("get") or get_page(*args, **kw)
    pool.set_from_flat_data_page = lambda *args: calls.append("set") or set_page(*args)
    keys = keys_for("v1-after-legacy", 2)
    assert a.batch_set_v1(keys, host_indices([1, 2], pool.page_size)) == [True, True]
    assert a.batch_get_v1(keys, host_indices([3, 4], pool.page_size)) == [True, True]
    assert calls == []
    a.close()


def test_batch_set_get(store_dir):
    pool = HostPool(backing="torch", dtype=torch.float32)
    pool.fill_random(seed=3)
    a = adapter(store_dir, pool)
    keys = keys_for("batch", 4)
    values = [pool.get_data_page(p * pool.page_size, flat=True).clone() for p in range(4)]
    assert a.batch_set(keys, values)
    targets = [torch.zeros_like(v) for v in values]
    got = a.batch_get(keys + keys_for("absent", 1), targets + [torch.zeros_like(values[0])])
    assert got[-1] is None
    for g, t, v in zip(got, targets, values):
        assert g is t and torch.equal(t.view(torch.uint8), v.view(torch.uint8))
    # Legacy zero-copy form: pointers into the registered pool.
    ptrs, sizes = pool.get_page_buffer_meta(host_indices([5], pool.page_size))
    assert a.get(keys[0], ptrs, sizes) == ptrs
    assert np.array_equal(pool.page_bytes(5 * pool.page_size),
                          values[0].view(torch.uint8).numpy())
    a.close()


def test_mixed_operations_keep_fd_count(store_dir):
    before = open_fds()
    pool = HostPool(backing="torch")
    pool.fill_random(seed=4)
    a = adapter(store_dir, pool)
    steady = open_fds()
    keys = keys_for("mixed", 8)
    idx = host_indices(range(8), pool.page_size)
    steps = [
        lambda: a.batch_set_v1(keys, idx),
        lambda: a.batch_exists(keys),
        lambda: a.batch_get_v1(keys, idx),
        lambda: a.set(keys[0], pool.get_data_page(0, flat=True).clone()),
        lambda: a.get(keys[1]),
        lambda: a.exists(keys[2]),
        lambda: a.batch_get_v1(keys_for("absent", 4), host_indices(range(4), pool.page_size)),
        lambda: a.batch_set(keys[:2], [pool.get_data_page(0, flat=True).clone()] * 2),
        lambda: a.batch_get(keys[:2]),
        lambda: a.get_stats(),
        lambda: a.clear(),
    ]
    for step in steps * 3:
        step()
        assert open_fds() == steady
    a.close()
    assert open_fds() == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64,
                                   torch.bool, torch.bfloat16, torch.float16, torch.uint8])
def test_integrity_across_dtypes(store_dir, dtype):
    src = HostPool(backing="torch", dtype=dtype)
    src.fill_random(seed=5)
    a = adapter(store_dir, src)
    keys = keys_for(f"dt{str(dtype)[6:]}", 3)
    assert a.batch_set_v1(keys, host_indices([0, 1, 2], src.page_size)) == [True] * 3
    dst = HostPool(backing="torch", dtype=dtype)
    b = adapter(store_dir, dst)
    assert b.batch_get_v1(keys, host_indices([3, 4, 5], dst.page_size)) == [True] * 3
    for s, d in zip([0, 1, 2], [3, 4, 5]):
        assert np.array_equal(src.page_bytes(s * src.page_size),
                              dst.page_bytes(d * dst.page_size))
    # Another dtype is another namespace: no exchange of bytes between them.
    other = HostPool(backing="torch", dtype=torch.int16 if dtype != torch.int16 else torch.int8)
    c = adapter(store_dir, other)
    assert c.batch_exists(keys) == 0
    for x in (a, b, c):
        x.close()


def test_exists(store_dir):
    pool = HostPool()
    pool.fill_random(seed=6)
    a = adapter(store_dir, pool)
    keys = keys_for("ex", 3)
    assert not a.exists(keys[0]) and a.batch_exists(keys) == 0
    a.batch_set_v1(keys[:2], host_indices([0, 1], pool.page_size))
    assert a.exists(keys[0]) and a.exists(keys[1]) and not a.exists(keys[2])
    assert a.batch_exists(keys) == 2
    a.close()


def test_register_and_close_leave_nothing_open(store_dir):
    before = open_fds()
    for layout in LAYOUTS:
        pool = HostPool(layout=layout, backing="torch")
        a = adapter(store_dir, pool)
        a.batch_set_v1(keys_for(layout, 2), host_indices([0, 1], pool.page_size))
        a.get(keys_for(layout, 1)[0], torch.zeros(64))  # wrong size: False, no leak
        a.close()
        a.close()
        assert open_fds() == before
        # After close every call answers as a miss instead of raising.
        assert a.batch_get_v1(keys_for(layout, 1), host_indices([0], pool.page_size)) == [False]
        assert a.batch_exists(keys_for(layout, 1)) == 0
    # The transfer layer: registrations and targets closed leave nothing open either.
    agent = kvtier.Agent()
    mem = np.zeros(1 << 16, dtype=np.uint8)
    reg = agent.register_memory(mem)
    targets = [agent.open_target(os.path.join(store_dir, f"f{i}"), mode="create")
               for i in range(16)]
    assert open_fds() > before
    for t in targets:
        t.close()
    reg.release()
    del agent, targets
    assert open_fds() == before


# -- prefix semantics and per-page failures ----------------------------------------------

def test_a_hole_ends_the_read_and_nothing_after_it_is_read(store_dir):
    pool = HostPool()
    pool.fill_random(seed=8)
    a = adapter(store_dir, pool)
    keys = keys_for("hole", 6)
    idx = host_indices(range(6), pool.page_size)
    assert a.batch_set_v1(keys, idx) == [True] * 6
    a._store.remove(keys[2])
    assert a.batch_exists(keys) == 2
    dst = HostPool()
    b = adapter(store_dir, dst)
    got = b.batch_get_v1(keys, host_indices(range(6, 12), dst.page_size))
    # SGLang uses the leading run only: the pages after the hole are not read at all.
    assert got == [True, True, False, False, False, False]
    for i in (0, 1):
        assert np.array_equal(dst.page_bytes((6 + i) * dst.page_size),
                              pool.page_bytes(i * pool.page_size))
    for i in (3, 4, 5):
        assert not dst.page_bytes((6 + i) * dst.page_size).any()
    assert b.counters()["get_not_read"] == 4
    assert b.counters()["store"]["get_hits"] == 2
    a.close()
    b.close()


# -- namespaces ---------------------------------------------------------------------------

def test_different_deployments_never_share_pages(store_dir):
    base = HostPool()
    base.fill_random(seed=9)
    writer = adapter(store_dir, base, StorageConfig(model_name="org/model-a", tp_size=2))
    keys = keys_for("ns", 4)
    assert writer.batch_set_v1(keys, host_indices(range(4), base.page_size)) == [True] * 4

    def reads(config, pool, **options):
        b = adapter(store_dir, pool, config, **options)
        try:
            return b.batch_exists(keys), b.batch_get_v1(keys, host_indices(range(4),
                                                                           pool.page_size))
        finally:
            b.close()

    others = [
        (StorageConfig(model_name="org/model-b", tp_size=2), HostPool(), {}),
        (StorageConfig(model_name="org/model-a", tp_size=4), HostPool(), {}),
        (StorageConfig(model_name="org/model-a", tp_rank=1, tp_size=2), HostPool(), {}),
        (StorageConfig(model_name="org/model-a", tp_size=2), HostPool(page_size=8), {}),
        (StorageConfig(model_name="org/model-a", tp_size=2), HostPool(layout="page_first_direct"),
         {}),
        (StorageConfig(model_name="org/model-a", tp_size=2, pp_size=2), HostPool(), {}),
        (StorageConfig(model_name="org/model-a", tp_size=2), HostPool(), {"salt": "tenant-2"}),
        (StorageConfig(model_name="org/model-a", tp_size=2), HostPool(),
         {"model_revision": "abc123"}),
        (StorageConfig(model_name="org/model-a", tp_size=2), HostPool(heads=4), {}),
    ]
    for config, pool, options in others:
        assert reads(config, pool, **options) == (0, [False] * 4), (config, options)
    same = HostPool()
    assert reads(StorageConfig(model_name="org/model-a", tp_size=2), same) == (4, [True] * 4)
    assert np.array_equal(same.page_bytes(0), base.page_bytes(0))
    writer.close()


def test_mla_rank0_writes_and_every_rank_reads(store_dir):
    pool0 = HostPool(mla=True)
    pool0.fill_random(seed=10)
    rank0 = adapter(store_dir, pool0, StorageConfig(is_mla_model=True, tp_rank=0, tp_size=4))
    pool2 = HostPool(mla=True)
    pool2.fill_random(seed=11)  # different bytes: if rank 2 wrote, readers would see them
    rank2 = adapter(store_dir, pool2, StorageConfig(is_mla_model=True, tp_rank=2, tp_size=4))
    keys = keys_for("mla", 3)
    idx = host_indices(range(3), pool0.page_size)
    assert rank2.batch_set_v1(keys, idx) == [True] * 3  # no I/O on ranks other than 0
    assert rank2.batch_exists(keys) == 0
    assert rank0.batch_set_v1(keys, idx) == [True] * 3
    dst = HostPool(mla=True)
    rank3 = adapter(store_dir, dst, StorageConfig(is_mla_model=True, tp_rank=3, tp_size=4))
    assert rank3.batch_get_v1(keys, host_indices(range(4, 7), dst.page_size)) == [True] * 3
    assert np.array_equal(dst.page_bytes(4 * dst.page_size), pool0.page_bytes(0))
    assert rank2.counters()["skipped_writes"] == 3
    for a in (rank0, rank2, rank3):
        a.close()


# -- faults never raise ------------------------------------------------------------------

@pytest.mark.parametrize("file_layout", ["files", "segments"])
def test_corrupt_page_is_a_miss_not_an_exception(store_dir, file_layout):
    pool = HostPool()
    pool.fill_random(seed=12)
    a = adapter(store_dir, pool, file_layout=file_layout)
    keys = keys_for("corrupt", 3)
    a.batch_set_v1(keys, host_indices(range(3), pool.page_size))
    victim = None
    for d in a._store.namespace_dirs:
        for root, _, files in os.walk(d):
            for f in files:
                if f != "namespace.json" and not f.endswith(".sum"):
                    victim = os.path.join(root, f)
    # Inside the payload of a page file, or of a segment's first record (after the
    # segment's 4,096-byte header and the record's compact one: 128 + the 64-byte key).
    offset = 4096 + 100 if file_layout == "files" else 4096 + 128 + 64 + 100
    with open(victim, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * 16)
    got = a.batch_get_v1(keys, host_indices(range(8, 11), pool.page_size))
    assert got.count(False) == 1
    assert a.counters()["store"]["get_corrupt"] == 1
    a.close()


def test_storage_faults_return_false(store_dir, caplog):
    pool = HostPool()
    pool.fill_random(seed=13)
    a = adapter(store_dir, pool, file_layout="files")
    keys = keys_for("fault", 4)
    idx = host_indices(range(4), pool.page_size)
    assert a.batch_set_v1(keys, idx) == [True] * 4
    # The namespace directory becomes a file: every access fails with ENOTDIR (root ignores
    # permission bits, so an unwritable directory is made this way).
    for d in a._store.namespace_dirs:
        shutil.rmtree(d)
        with open(d, "w") as f:
            f.write("in the way")
    with caplog.at_level(logging.WARNING, logger="kvtier.sglang"):
        assert a.batch_set_v1(keys_for("more", 4), idx) == [False] * 4
        assert a.batch_get_v1(keys, idx) == [False] * 4
        assert a.batch_exists(keys) == 0
        assert a.set(keys[0], pool.get_data_page(0, flat=True).copy()) is False
        assert a.get(keys[0]) is None
        assert a.clear() in (True, False)
        # Caller errors inside SGLang's threads are contained the same way.
        assert a.batch_get_v1(keys, host_indices(range(3), pool.page_size)) == [False] * 4
    c = a.counters()
    assert c["set_faults"] >= 4 and c["get_faults"] + c["get_misses"] >= 4
    assert any("kvtier" in r.message for r in caplog.records)
    assert len(caplog.records) < 12  # rate-limited, not one line per page
    a.close()


def test_options_and_environment(store_dir, monkeypatch):
    monkeypatch.setenv("KVTIER_URI", f"file://{store_dir}")
    monkeypatch.setenv("KVTIER_BACKEND", "posix")
    monkeypatch.setenv("KVTIER_SALT", "env-tenant")
    a = HiCacheKvtier(StorageConfig(), None)
    a.register_mem_pool_host(HostPool())
    assert a._store.backend.startswith("posix")
    assert a._store.namespace["salt"] == "env-tenant"
    assert a._store.namespace_dirs[0].startswith(store_dir)
    a.close()
    b = adapter(store_dir, HostPool(), salt="opt")  # options win over the environment
    assert b._store.namespace["salt"] == "opt"
    b.close()
    with pytest.raises(ValueError, match="backend"):
        HiCacheKvtier(StorageConfig(), {"backend": "ftp"})
    with pytest.raises(ValueError, match="direct_io"):
        HiCacheKvtier(StorageConfig(), {"direct_io": "maybe"})
    with pytest.raises(ValueError, match="capacity"):
        HiCacheKvtier(StorageConfig(), {"capacity": "lots"})
    assert HiCacheKvtier(StorageConfig(), {"capacity": "1.5GiB"}).capacity_bytes == 1610612736
    assert HiCacheKvtier(StorageConfig(), {"capacity": 1000}).capacity_bytes == 1000


def test_sealed_pages_through_the_adapters_options(store_dir, tmp_path, monkeypatch):
    # extra_config's key_file and tenant (or KVTIER_KEY_FILE): each tenant's pages sealed
    # under its own keys; "tenant" also stays the salt it always was.
    monkeypatch.delenv("KVTIER_KEY_FILE", raising=False)
    keys = tmp_path / "keys"
    keys.write_text("1 " + "c4" * 32 + "\n")
    keys.chmod(0o600)
    a = adapter(store_dir, HostPool(), key_file=str(keys), tenant="alpha")
    assert "tenant alpha" in a._store.stats()["sealing"]
    assert a._store.namespace["salt"] == "alpha"
    a.close()
    monkeypatch.setenv("KVTIER_KEY_FILE", str(keys))
    b = adapter(store_dir, HostPool(), tenant="beta")
    assert "tenant beta" in b._store.stats()["sealing"]
    b.close()
    monkeypatch.delenv("KVTIER_KEY_FILE")
    c = adapter(store_dir, HostPool(), tenant="gamma")  # no key: a salt, pages in the clear
    assert c._store.stats()["sealing"] == "off"
    c.close()


@pytest.mark.parametrize("how", ["option", "uri", "environment"])
def test_the_segment_layout_through_one_option(store_dir, monkeypatch, how):
    options = {}
    if how == "option":
        options["file_layout"] = "segments"
    elif how == "uri":
        options["uri"] = f"file://{store_dir}?layout=segments"
    else:
        monkeypatch.setenv("KVTIER_FILE_LAYOUT", "segments")
    src = HostPool()
    src.fill_random(seed=18)
    writer = adapter(store_dir, src, **options)
    assert writer._store.file_layout == "segments"
    keys = keys_for("seg", 4)
    assert writer.batch_set_v1(keys, host_indices([0, 1, 2, 3], src.page_size)) == [True] * 4
    # No file per page: the pages are records in a segment file of this writer.
    ns_dir = writer._store.namespace_dirs[0]
    assert sorted(os.listdir(os.path.join(ns_dir, "seg")))[0].endswith(".seg")
    assert not [d for d in os.listdir(ns_dir) if len(d) == 2]
    dst = HostPool()
    reader = adapter(store_dir, dst, **options)
    assert reader.batch_exists(keys) == 4
    assert reader.batch_get_v1(keys, host_indices([4, 5, 6, 7], dst.page_size)) == [True] * 4
    for i in range(4):
        assert np.array_equal(dst.page_bytes((4 + i) * dst.page_size),
                              src.page_bytes(i * src.page_size))
    with pytest.raises(ValueError, match="file_layout"):
        HiCacheKvtier(StorageConfig(), {"file_layout": "blocks"})


def test_a_bad_location_parameter_fails_registration_naming_it(store_dir):
    for uri, named in ((f"file://{store_dir}?queue_dept=128", "queue_dept"),
                       (f"file://{store_dir}?queue_depth=abc", "queue_depth"),
                       (f"file://{store_dir}?bogus=1", "bogus")):
        a = HiCacheKvtier(StorageConfig(), {"uri": uri})
        with pytest.raises(ValueError, match=named):
            a.register_mem_pool_host(HostPool())
        a.close()


def test_a_hung_mount_costs_misses_by_the_deadline_never_a_hung_call(hangfs):
    """SGLang's prefetch and backup threads call synchronously: on a mount whose server is
    gone (kvtier_hangfs, hung on command) every call still returns by deadline_ms, as
    misses; the location is then skipped at once, reported in the metrics, and serves again
    once it answers."""
    pool = HostPool()
    pool.fill_random(seed=11)
    a = adapter(os.path.join(hangfs.mount, "kv"), pool, deadline_ms=400)
    store = a.counters()["store"]
    assert "fuse" in store["isolation"], store["isolation"]
    keys = keys_for("hung", 8)
    assert a.batch_set_v1(keys, host_indices(range(8), pool.page_size)) == [True] * 8
    expected = [pool.page_bytes(p * pool.page_size) for p in range(8)]
    slots = host_indices(range(8, 16), pool.page_size)
    before = [pool.page_bytes(p * pool.page_size) for p in range(8, 16)]

    hangfs.hang()
    start = time.monotonic()
    assert a.batch_get_v1(keys, slots) == [False] * 8
    assert time.monotonic() - start < 0.4 + 1.5  # the deadline, and scheduling slack
    # Skipped at once once its probe found it not answering: no call waits for the deadline
    # again (counted, not timed: a loaded machine may take longer than 0.4 s over nothing).
    assert a._store.wait_health(answering=False, timeout_s=120)
    missed = a.counters()["store"]["deadline_misses"]
    assert a.batch_exists(keys) == 0
    assert a.batch_set_v1(keys_for("hung-more", 8), host_indices(range(8), pool.page_size)) \
        == [False] * 8
    assert a.counters()["store"]["deadline_misses"] == missed
    store = a.counters()["store"]
    assert store["locations_unhealthy"] == 1
    assert store["deadline_misses"] >= 8
    assert "not answering" in store["health"]
    assert "kvtier_locations_unhealthy{" in a.prometheus()

    hangfs.release()
    # The KV pool's store tells when it answers again (a wait on its events, no polling).
    assert a._store.wait_health(answering=True, timeout_s=120)
    assert a.counters()["store"]["health"] == "answering"
    # The late reads never reached SGLang's slots; a read now does.
    for p, old in zip(range(8, 16), before):
        assert np.array_equal(pool.page_bytes(p * pool.page_size), old)
    assert a.batch_get_v1(keys, slots) == [True] * 8
    for p, want in zip(range(8, 16), expected):
        assert np.array_equal(pool.page_bytes(p * pool.page_size), want)
    a.close()


def test_a_hung_mount_bounds_clear_and_start_up_too(hangfs):
    """SGLang clears the store on reset and opens it at start-up: on a hung mount both return
    by deadline_ms (clear: False, the failure logged; opening: an error naming the deadline),
    and once the mount answers the clear has been finished whole."""
    pool = HostPool()
    pool.fill_random(seed=12)
    a = adapter(os.path.join(hangfs.mount, "kv"), pool, deadline_ms=400)
    keys = keys_for("hung-clear", 8)
    assert a.batch_set_v1(keys, host_indices(range(8), pool.page_size)) == [True] * 8

    hangfs.hang()
    start = time.monotonic()
    assert a.clear() is False
    assert time.monotonic() - start < 0.4 + 1.5  # the deadline, and scheduling slack
    start = time.monotonic()
    b = HiCacheKvtier(StorageConfig(), {"uri": f"file://{os.path.join(hangfs.mount, 'kv2')}",
                                        "deadline_ms": 400})
    with pytest.raises(kvtier.Error, match="deadline"):
        b.register_mem_pool_host(HostPool())
    assert time.monotonic() - start < 0.4 + 1.5
    b.close()

    hangfs.release()
    assert a._store.wait_health(answering=True, timeout_s=120)
    assert a.batch_exists(keys) == 0
    fresh = adapter(os.path.join(hangfs.mount, "kv"), HostPool(), deadline_ms=400)
    assert fresh.batch_exists(keys) == 0
    fresh.close()
    a.close()


def test_deadline_and_isolate_options(store_dir):
    a = adapter(store_dir, HostPool(), deadline_ms=250, isolate="on")
    assert a.counters()["store"]["isolation"].endswith(": on")
    a.close()
    with pytest.raises(kvtier.InvalidArgumentError, match="isolate"):
        adapter(store_dir, HostPool(), isolate="sometimes")


def test_capacity_evicts_least_recently_used_pages(store_dir):
    pool = HostPool(tokens=256)
    pool.fill_random(seed=18)
    page_object = page_object_bytes(store_dir)
    a = adapter(store_dir, pool, capacity=kvtier.capacity_holding(8 * page_object),
                file_layout="files")
    keys = keys_for("cap", 12)
    for i in range(0, 12, 4):
        assert a.batch_set_v1(keys[i:i + 4], host_indices(range(i, i + 4), pool.page_size)) == \
            [True] * 4
        if i == 4:
            # The first four were read back: they are recent, 4..7 become the oldest.
            assert a.batch_get_v1(keys[:4], host_indices(range(40, 44), pool.page_size)) == \
                [True] * 4
    stats = a.counters()["store"]
    assert stats["used_bytes"] <= 8 * page_object
    assert stats["evicted_pages"] == 4
    assert a.batch_exists(keys[:4]) == 4
    assert a.batch_exists(keys[4:8]) == 0
    assert a.batch_exists(keys[8:]) == 4
    a.close()


@pytest.mark.parametrize("layout", ["files", "segments"])
def test_capacity_bounds_the_whole_tree_as_du_counts_it(store_dir, layout):
    """`capacity` is what the tree under the location takes (st_blocks, as du counts it), pages
    and what kvtier keeps beside them, within one page, from the smallest capacity accepted up;
    one below that is refused, saying why."""
    pool = HostPool(tokens=512)
    pool.fill_random(seed=23)
    page_object = page_object_bytes(store_dir)
    smallest = kvtier.capacity_holding(page_object, layout)
    with pytest.raises(kvtier.InvalidArgumentError, match=f"at least {smallest}"):
        adapter(store_dir + "-small", pool, capacity=smallest - 1, file_layout=layout)
    for capacity in (smallest, 2 * smallest, 8 << 20):
        root = f"{store_dir}-{capacity}"
        a = adapter(root, pool, capacity=capacity, file_layout=layout)
        room = capacity - a.counters()["store"]["metadata_bytes"]
        batch = max(1, min(8, room // page_object // 4))
        # Three capacities of pages: page files of page_object bytes, or records a little
        # larger than a page (segments).
        stored = page_object if layout == "files" else a.page_bytes
        for first in range(0, 3 * capacity // stored, batch):
            keys = keys_for(f"du{first}", batch)
            a.batch_set_v1(keys, host_indices(range(batch), pool.page_size))
        store = a.counters()["store"]
        a.close()
        assert store["evicted_pages"] > 0 and store["pages"] > 0, store
        assert store["used_bytes"] + store["metadata_bytes"] <= capacity
        assert du(root) <= capacity + page_object, (layout, capacity, du(root))


def test_capacity_is_the_deployments_whatever_its_tp_ranks(store_dir):
    """Each TP rank of a model whose heads are split keeps its pages in a namespace of its own,
    with a ledger of its own: `capacity` is split between them, so the deployment's tree stays
    within it; a replicated (MLA) pool is one namespace for every rank, with the whole."""
    page_object = page_object_bytes(store_dir)
    capacity = 2 * kvtier.capacity_holding(24 * page_object)
    ranks = []
    for rank in range(2):
        pool = HostPool(tokens=256)
        pool.fill_random(seed=30 + rank)
        ranks.append((adapter(store_dir, pool, StorageConfig(tp_rank=rank, tp_size=2),
                              capacity=capacity, file_layout="files"), pool))
    for first in range(0, 3 * capacity // page_object, 8):
        for a, pool in ranks:
            a.batch_set_v1(keys_for(f"tp{first}", 8), host_indices(range(8), pool.page_size))
    for a, _ in ranks:
        store = a.counters()["store"]
        assert store["capacity_bytes"] == capacity // 2 and store["evicted_pages"] > 0, store
        a.close()
    assert du(store_dir) <= capacity + page_object, (capacity, du(store_dir))
    mla = adapter(store_dir + "-mla", HostPool(tokens=256),
                  StorageConfig(tp_rank=1, tp_size=2, is_mla_model=True), capacity=capacity)
    assert mla.counters()["store"]["capacity_bytes"] == capacity
    mla.close()


def test_admission_declines_one_offs_through_sglang_calls(store_dir):
    """A full store declines first writes once that measures better, from what SGLang asks
    (batch_exists), not from the adapter's own checks before a write or a read: with those
    counted, every page missed would look asked for twice and be taken. A declined page
    reports success to SGLang and is a miss later."""
    pool = HostPool(tokens=64)
    pool.fill_random(seed=21)
    page_object = page_object_bytes(store_dir)
    a = adapter(store_dir, pool, capacity=kvtier.capacity_holding(128 * page_object),
                file_layout="files")
    assert a.counters()["store"]["admission"].startswith("adaptive")
    # 16 shared prompts of 4 pages; each request one of them and 8 pages never asked again.
    for r in range(400):
        keys = keys_for(f"prompt{r % 16}", 4) + keys_for(f"once{r}", 8)
        idx = host_indices(range(len(keys)), pool.page_size)
        n = a.batch_exists(keys)
        found = 0
        if n:
            ok = a.batch_get_v1(keys[:n], idx[:n * pool.page_size])
            while found < n and ok[found]:
                found += 1
        rest = keys[found:]
        assert a.batch_set_v1(rest, idx[found * pool.page_size:]) == [True] * len(rest)
    store = a.counters()["store"]
    assert "declining first writes" in store["admission"], store["admission"]
    assert store["declined_pages"] > 0 and store["admitted_pages"] > 0
    assert store["used_bytes"] <= 128 * page_object
    key = keys_for("written-once", 1)
    assert a.batch_set_v1(key, host_indices(range(1), pool.page_size)) == [True]
    assert a.batch_exists(key) == 0
    a.close()
    b = adapter(store_dir + "-always", pool, capacity=kvtier.capacity_holding(128 * page_object),
                admission="always")
    assert b.counters()["store"]["admission"] == "always"
    b.close()
    with pytest.raises(kvtier.InvalidArgumentError, match="admission"):
        adapter(store_dir + "-bad", HostPool(), admission="sometimes")


def test_get_stats_reports_pages_and_bandwidth(store_dir):
    pool = HostPool()
    pool.fill_random(seed=14)
    a = adapter(store_dir, pool, StorageConfig(enable_storage_metrics=True))
    keys = keys_for("stats", 4)
    idx = host_indices(range(4), pool.page_size)
    a.batch_set_v1(keys, idx)
    a.batch_get_v1(keys, idx)
    # Without SGLang there is no StorageMetrics type to return: None, never a foreign type.
    assert a.get_stats() is None
    a.batch_get_v1(keys, idx)
    m = a.storage_metrics()  # kvtier's own view
    assert m.backup_pgs == [] and m.prefetch_pgs == [4]  # get_stats took the first interval
    assert len(m.prefetch_bandwidth) == 1 and m.prefetch_bandwidth[0] > 0
    assert a.storage_metrics().prefetch_pgs == []  # per interval
    c = a.counters()
    assert c["set_ok"] == 4 and c["get_hits"] == 8 and c["store"]["put_pages"] == 4
    assert c["store"]["put_latency"]["count"] == 1 and c["store"]["get_latency"]["count"] == 2
    assert sum(c["store"]["get_latency"]["buckets"]) == 2
    text = a.prometheus()
    assert "# TYPE kvtier_get_batch_seconds histogram" in text
    assert 'kvtier_put_pages_total{namespace="' in text and 'tp_rank="0"' in text
    a.close()


# -- threads ------------------------------------------------------------------------------

def test_reader_and_writer_threads_hammering(store_dir):
    before = open_fds()
    pool = HostPool(tokens=512, backing="torch")
    pool.fill_random(seed=15)
    a = adapter(store_dir, pool)
    steady = open_fds()
    fd_samples = []

    # The writer sets 20,000 batches (about a second here); the reader reads until it is done,
    # then once more over the 16 key sets.
    def write(n):
        res = a.batch_set_v1(keys_for(f"w{n % 16}-", 8), host_indices(range(8), pool.page_size))
        return None if res == [True] * 8 else ("set", res)

    def read(n):
        keys = keys_for(f"w{n % 16}-", 8)
        hit = a.batch_exists(keys)
        got = a.batch_get_v1(keys[:hit], host_indices(range(64, 64 + hit), pool.page_size))
        fd_samples.append(open_fds())
        return None if got == [True] * hit else ("get", got)

    errors = writer_and_reader(write, read, writes=20000, last_rounds=16)
    assert not errors, errors[:3]
    assert fd_samples and max(fd_samples) <= steady + 2 * 8 + 4  # at most the open batches
    assert open_fds() == steady
    # Everything the writer wrote reads back byte-exactly.
    assert a.batch_get_v1(keys_for("w0-", 8), host_indices(range(100, 108),
                                                         pool.page_size)) == [True] * 8
    assert np.array_equal(pool.page_bytes(100 * pool.page_size), pool.page_bytes(0))
    a.close()
    assert open_fds() == before


# -- inside SGLang ------------------------------------------------------------------------

def test_subclasses_sglang_interface_when_importable(store_dir, monkeypatch):
    """With SGLang importable the adapter is a HiCacheStorage (whose abstract methods it
    must all implement) and get_stats() returns SGLang's StorageMetrics, found at the module
    path older SGLang releases used."""
    import importlib
    import sys
    import types

    import kvtier.sglang as adapter_module

    # SGLang's interface as sglang_fakes mirrors it; the metrics at their old path only.
    from sglang_fakes import HiCacheStorage

    class StorageMetrics:
        def __init__(self):
            self.prefetch_pgs, self.backup_pgs = [], []
            self.prefetch_bandwidth, self.backup_bandwidth = [], []

    storage_mod = types.ModuleType("sglang.srt.mem_cache.hicache_storage")
    storage_mod.HiCacheStorage = HiCacheStorage
    metrics_mod = types.ModuleType("sglang.srt.metrics.collector")
    metrics_mod.StorageMetrics = StorageMetrics
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.metrics"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, storage_mod.__name__, storage_mod)
    monkeypatch.setitem(sys.modules, metrics_mod.__name__, metrics_mod)
    try:
        module = importlib.reload(adapter_module)
        assert issubclass(module.HiCacheKvtier, HiCacheStorage)
        pool = HostPool()
        pool.fill_random(seed=16)
        a = module.HiCacheKvtier(StorageConfig(), {"uri": store_dir})
        a.register_mem_pool_host(pool)
        assert a.batch_set_v1(keys_for("sg", 2), host_indices([0, 1], pool.page_size)) == \
            [True, True]
        m = a.get_stats()
        assert isinstance(m, StorageMetrics) and m.backup_pgs == [2]
        a.close()
    finally:
        monkeypatch.undo()
        importlib.reload(adapter_module)
    assert adapter_module._HiCacheStorage is object


# -- object storage -----------------------------------------------------------------------

def test_roundtrip_through_s3(monkeypatch):
    """The adapter on an s3:// URI (the S3 server `make test` starts; skipped without one)."""
    endpoint, region, bucket = s3_test_server(monkeypatch)
    # deadline_ms: kvtier's deadline for a batch (10 s by default, then its pages fail) is only
    # a ceiling here; a radosgw slowed by a loaded machine must not fail the test.
    uri = (f"s3://{bucket}/adapter-{os.getpid()}-{time.time_ns()}?endpoint={endpoint}"
           f"&region={region}&deadline_ms=300000")
    before = open_fds()
    src = HostPool(backing="torch")
    src.fill_random(seed=17)
    a = HiCacheKvtier(StorageConfig(), {"uri": uri})
    a.register_mem_pool_host(src)
    assert a._store.backend.startswith("s3")
    keys = keys_for("s3", 8)
    assert a.batch_set_v1(keys, host_indices(range(8), src.page_size)) == [True] * 8
    dst = HostPool(backing="torch")
    b = HiCacheKvtier(StorageConfig(), {"uri": uri})
    b.register_mem_pool_host(dst)
    assert b.batch_exists(keys) == 8
    assert b.batch_get_v1(keys, host_indices(range(8, 16), dst.page_size)) == [True] * 8
    for i in range(8):
        assert np.array_equal(dst.page_bytes((8 + i) * dst.page_size),
                              src.page_bytes(i * src.page_size))
    assert a.clear()
    assert a.batch_exists(keys) == 0
    # b learns of another process's removal when it reads: a miss, then no longer indexed.
    assert b.batch_get_v1(keys, host_indices(range(8, 16), dst.page_size)) == [False] * 8
    assert b.batch_exists(keys) == 0
    a.close()
    b.close()
    assert open_fds() == before
