"""The kvtier Python module: Store, Agent, registrations, transfers, buffers, errors."""

import os
import select
import sys
import threading

import numpy as np
import pytest
import torch

import kvtier
from conftest import open_fds


def make_store(path, **kw):
    kw.setdefault("model", "m")
    kw.setdefault("dtype", "uint8")
    kw.setdefault("layout", "flat")
    kw.setdefault("page_tokens", 1)
    return kvtier.Store(path, **kw)


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def test_put_get_numpy_roundtrip(store_dir):
    with make_store(store_dir) as store:
        pool = np.zeros(1 << 20, dtype=np.uint8)
        with store.register_memory(pool):
            pool[:70272] = pattern(70272, 1)
            st = store.put("page-a", pool[:70272])
            assert st and st.ok and st.code == "OK"
            got = store.get("page-a", pool[100000:170272])
            assert got.ok
            assert np.array_equal(pool[:70272], pool[100000:170272])
            miss = store.get("page-b", pool[100000:170272])
            assert not miss and miss.code == "NOT_FOUND" and miss.is_miss
            assert store.exists("page-a") and not store.exists("page-b")
            stats = store.stats()
            assert stats["put_pages"] == 1 and stats["get_hits"] == 1
            assert stats["get_misses"] == 1


def test_every_memory_form(store_dir):
    """Buffer protocol (numpy, bytearray, memoryview), (address, nbytes), torch tensors, and
    pages of several pieces."""
    with make_store(store_dir) as store:
        arr = np.zeros(1 << 16, dtype=np.uint8)
        tensor = torch.zeros(1 << 14, dtype=torch.float32)  # 64 KiB, no buffer protocol
        raw = bytearray(1 << 16)
        regs = [store.register_memory(arr), store.register_memory(tensor),
                store.register_memory(raw)]
        arr[:4096] = pattern(4096, 2)
        assert store.put("np", arr[:4096])
        assert store.get("np", tensor[:1024])  # 1024 float32 = 4096 bytes
        assert np.array_equal(tensor[:1024].view(torch.uint8).numpy(), arr[:4096])
        assert store.get("np", memoryview(raw)[:4096])
        assert bytes(raw[:4096]) == arr[:4096].tobytes()
        assert store.get("np", (arr.ctypes.data + 8192, 4096))
        assert np.array_equal(arr[8192:12288], arr[:4096])
        # Two pieces make one page: stored back to back.
        assert store.put("two", [arr[:1000], arr[5000:6000]])
        assert store.get("two", [arr[20000:21000], arr[30000:31000]])
        joined = np.concatenate([arr[20000:21000], arr[30000:31000]])
        assert np.array_equal(joined, np.concatenate([arr[:1000], arr[5000:6000]]))
        # The same bytes split differently are another page layout: a caller error.
        with pytest.raises(ValueError, match="pieces of 1000"):
            store.get("two", [arr[20000:20500], arr[30000:31500]])
        for r in regs:
            r.release()
            assert not r.valid


def test_caller_errors_raise_value_errors(store_dir):
    with make_store(store_dir) as store:
        pool = np.zeros(1 << 16, dtype=np.uint8)
        with store.register_memory(pool):
            outside = np.zeros(4096, dtype=np.uint8)
            with pytest.raises(kvtier.InvalidArgumentError) as e:
                store.put("k", outside)
            assert e.value.code == "INVALID_ARGUMENT" and isinstance(e.value, ValueError)
            with pytest.raises(ValueError, match="writable"):
                store.get("k", bytes(16))
            with pytest.raises(ValueError, match="pages"):
                store.batch_put(["a", "b"], [pool[:10]])
            with pytest.raises(ValueError, match="contiguous"):
                store.put("k", pool[:200:2])
            with pytest.raises(ValueError, match="not page memory"):
                store.put("k", "a string")
            with pytest.raises(ValueError, match="empty"):
                store.put("k", pool[:0])
            with pytest.raises(ValueError):
                store.put("", pool[:10])  # empty key
            with pytest.raises(ValueError, match="pieces"):
                store.batch_put_pieces(["a", "b"], [pool.ctypes.data] * 3, [10] * 3)
            assert store.stats()["invalid_requests"] >= 1
    with pytest.raises(ValueError, match="closed"):
        store.exists("k")


def test_a_forked_child_is_refused_at_once_and_the_parent_goes_on(store_dir):
    """A Store belongs to the process that opened it. In a forked child (os.fork, or
    multiprocessing's "fork" start method) its calls raise InvalidArgumentError at once,
    whatever its threads held at the fork, and the child's copy, dropped, releases nothing
    of the parent's."""
    with make_store(store_dir) as store:
        pool = np.zeros(1 << 16, dtype=np.uint8)
        with store.register_memory(pool):
            pool[:4096] = pattern(4096, 3)
            assert store.put("a", pool[:4096])
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: only the store, then out without Python's cleanup
                code = 1
                try:
                    store.exists("a")
                except kvtier.InvalidArgumentError as e:
                    code = 0 if "forked child" in str(e) else 2
                except BaseException:
                    code = 3
                if code == 0:
                    try:
                        store.get("a", pool[8192:12288])
                        code = 4
                    except kvtier.InvalidArgumentError:
                        pass
                os.write(w, bytes([code]))
                os._exit(code)
            os.close(w)
            # The child's answer, or the hang this guards against (a ceiling, not a speed).
            ready, _, _ = select.select([r], [], [], 120)
            if not ready:
                os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
            os.close(r)
            assert ready, "the forked child hung on the parent's store"
            assert os.waitstatus_to_exitcode(status) == 0, status
            got = store.get("a", pool[8192:12288])
            assert got.ok and np.array_equal(pool[:4096], pool[8192:12288])
            assert store.stats()["invalid_requests"] == 0


def test_sealed_stores_keep_tenants_apart_and_the_key_out_of_sight(tmp_path, monkeypatch):
    monkeypatch.delenv("KVTIER_KEY_FILE", raising=False)
    key_hex = "5e" * 32
    keys = tmp_path / "keys"
    keys.write_text(f"3 {key_hex}\n")
    keys.chmod(0o600)
    where = str(tmp_path / "s")
    with make_store(where, key_file=str(keys), tenant="alpha") as alpha, \
            make_store(where, key_file=str(keys), tenant="beta") as beta:
        assert "tenant alpha" in alpha.stats()["sealing"]
        assert key_hex[:16] not in str(alpha.stats())
        pool = np.zeros(1 << 18, dtype=np.uint8)
        with alpha.register_memory(pool), beta.register_memory(pool):
            pool[:65536] = pattern(65536, 7)
            assert alpha.put("prefix", pool[:65536])
            assert alpha.get("prefix", pool[65536:131072])
            assert np.array_equal(pool[:65536], pool[65536:131072])
            pool[131072:196608] = 0x5A
            miss = beta.get("prefix", pool[131072:196608])
            assert not miss and miss.is_miss
            assert not beta.exists("prefix")
            assert np.all(pool[131072:196608] == 0x5A)
    keys.chmod(0o644)
    with pytest.raises(kvtier.Error) as e:
        make_store(where, key_file=str(keys), tenant="alpha")
    assert "chmod 600" in str(e.value) and key_hex[:16] not in str(e.value)
    with pytest.raises(kvtier.InvalidArgumentError) as e:
        make_store(where + "?key=" + key_hex)
    assert key_hex[:16] not in str(e.value)
    keys.write_text(f"3 {key_hex[:-1]}z\n")
    keys.chmod(0o600)
    with pytest.raises(kvtier.InvalidArgumentError) as e:
        make_store(where, key_file=str(keys), tenant="alpha")
    assert "line 1" in str(e.value) and key_hex[:16] not in str(e.value)
    with pytest.raises(kvtier.InvalidArgumentError):
        make_store(where, tenant="alpha")  # a tenant needs a key


def test_open_failures_raise_storage_errors(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(kvtier.StorageError) as e:
        make_store(str(blocker / "store"))
    assert isinstance(e.value, OSError) and e.value.code != "OK"
    with pytest.raises(kvtier.InvalidArgumentError):
        make_store(str(tmp_path / "x"), direct_io="sometimes")
    with pytest.raises(kvtier.Error):
        make_store(str(tmp_path / "x"), backend="no-such-backend")


@pytest.mark.parametrize("query,named", [
    ("file://{d}?bogus=1", "bogus"),
    ("file://{d}?queue_dept=128", "queue_dept"),
    ("file://{d}?queue_depth=abc", "queue_depth"),
    ("file://{d}?backend=posix&io_threads=x", "io_threads"),
    ("file://{d}?backend=posix&queue_depth=8", "queue_depth"),
    ("mem://strict?io_threads=4", "io_threads"),
    ("s3://kvtier-test/p?max_parallel=lots", "max_parallel"),
    ("file://{d}?chunk_hash=md5", "chunk_hash"),
])
def test_unknown_and_unparsable_location_parameters_are_named(tmp_path, query, named):
    uri = query.format(d=tmp_path / "strict")
    try:
        make_store(uri)
    except kvtier.InvalidArgumentError as e:
        assert named in str(e)
    except kvtier.Error as e:
        assert uri.startswith("s3://") and "no backend is built" in str(e), str(e)
    else:
        pytest.fail(f"{uri} opened")
    assert not (tmp_path / "strict").exists()
    with pytest.raises(kvtier.InvalidArgumentError, match="bogus"):
        kvtier.Agent(backend="posix", params={"bogus": "1"})


def test_pages_hashed_either_way_read_back_through_either_store(tmp_path):
    # A host whose CPU hashes chunks the other way (docs/format.md, "Payload checksum").
    where = str(tmp_path / "s")
    pool = np.zeros(1 << 20, dtype=np.uint8)
    with make_store(where + "?chunk_hash=crc64") as crc:
        assert crc.stats()["chunk_hash"] == "crc64 (chunk_hash=crc64)"
        with crc.register_memory(pool):
            pool[:300000] = pattern(300000, 3)
            assert crc.put("page", pool[:300000])
    with make_store(where + "?chunk_hash=xxh3") as xxh:
        assert xxh.stats()["chunk_hash"] == "xxh3 (chunk_hash=xxh3)"
        with xxh.register_memory(pool):
            assert xxh.get("page", pool[500000:800000])
            assert np.array_equal(pool[:300000], pool[500000:800000])
        assert xxh.stats()["get_corrupt"] == 0


def test_stats_and_prometheus_escape_label_values(store_dir):
    with make_store(store_dir) as store:
        stats = store.stats()
        for key in ("put_pages", "removes", "min_free_bytes", "direct_io", "errors_by_code"):
            assert key in stats
        assert stats["put_latency"]["count"] == 0
        text = store.prometheus([("dir", 'a"b\\c\nd'), ("rank", "0")])
        assert 'kvtier_put_pages_total{dir="a\\"b\\\\c\\nd",rank="0"} 0\n' in text
        assert all(line.startswith(("# ", "kvtier_")) for line in text.splitlines())
        assert 'kvtier_pages{rank="1"} 0\n' in store.prometheus('rank="1"')


def test_batches_report_each_page(store_dir):
    with make_store(store_dir) as store:
        pool = np.zeros(1 << 20, dtype=np.uint8)
        with store.register_memory(pool):
            pool[:] = pattern(pool.size, 3)
            keys = [f"k{i}" for i in range(8)]
            pages = [pool[i * 4096:(i + 1) * 4096] for i in range(8)]
            r = store.batch_put(keys, pages)
            assert r.all_ok and r.ok == [True] * 8 and len(r) == 8
            assert store.remove("k3")
            assert store.batch_exists(keys) == 3
            dst = [pool[500000 + i * 4096:500000 + (i + 1) * 4096] for i in range(8)]
            r = store.batch_get(keys, dst)
            assert r.ok == [True, True, True, False, True, True, True, True]
            assert r.ok_prefix == 3 and r.ok_count == 7
            assert r.pages[3].code == "NOT_FOUND"
            for i in (0, 1, 2, 4, 5, 6, 7):
                assert np.array_equal(dst[i], pages[i])
            # The same through flat pointer lists (a host pool's get_page_buffer_meta form).
            ptrs = [p.ctypes.data for p in dst]
            r = store.batch_get_pieces(keys, ptrs, [4096] * 8)
            assert r.ok_count == 7
            # And as int64 arrays (what a pool's geometry computes), read as they lie.
            dst[0][:] = 0
            r = store.batch_get_pieces(keys, np.array(ptrs, dtype=np.int64),
                                       np.full(8, 4096, dtype=np.uint64))
            assert r.ok_count == 7 and np.array_equal(dst[0], pages[0])
            with pytest.raises(ValueError, match=r"sizes\[2\] is negative"):
                store.batch_get_pieces(keys, np.array(ptrs), np.array([4096, 4096, -1] + [4096] * 5))
            with pytest.raises(ValueError, match="ptrs must be"):
                store.batch_get_pieces(keys, np.array(ptrs, dtype=np.float64), [4096] * 8)


def test_rows_of_a_host_pool_in_one_call(store_dir):
    # A pool of 16 pages of 2 tokens; a page's two pieces (K 300 B, V 200 B) live in two
    # regions, at strides of 300 and 200 bytes: what a host pool's geometry describes.
    with make_store(store_dir, page_tokens=2, piece_bytes=0, pieces_per_page=2) as store:
        pool = np.zeros(16 * 500, dtype=np.uint8)
        with store.register_memory(pool):
            base = pool.ctypes.data
            first, stride, sizes = [base, base + 16 * 300], [300, 200], [300, 200]

            def page(row):
                return np.concatenate([pool[row * 300:(row + 1) * 300],
                                       pool[4800 + row * 200:4800 + (row + 1) * 200]])

            pool[:] = pattern(pool.size, 5)
            want = {row: page(row).copy() for row in range(4)}
            keys = [f"r{i}" for i in range(4)]
            tokens = np.arange(0, 8, dtype=np.int64)  # rows 0..3
            n, r = store.batch_put_rows(keys, tokens, 2, first, stride, sizes, 16)
            assert n == 0 and r.all_ok and len(r) == 4
            # Stored pages are skipped as present; only the new one is written.
            n, r = store.batch_put_rows(keys + ["r4"], np.arange(0, 10), 2, first, stride, sizes,
                                        16, skip_present=True)
            assert n == 4 and r.all_ok and store.stats()["put_pages"] == 5
            # Read into rows 8..11, page 2 removed: the leading run is read, the rest not.
            assert store.remove("r2")
            n, r = store.batch_get_rows(keys, np.arange(16, 24), 2, first, stride, sizes, 16,
                                        leading=True)
            assert n == 2 and r.ok == [True, True, False, False]
            assert r.pages[3].code == "NOT_FOUND" and "not read" in r.pages[3].message
            assert np.array_equal(page(8), want[0]) and np.array_equal(page(9), want[1])
            assert not page(11).any() or not np.array_equal(page(11), want[3])
            # Without leading every page is read: the absent one alone is a miss.
            n, r = store.batch_get_rows(keys, [16, 17, 18, 19, 20, 21, 22, 23], 2, first, stride,
                                        sizes, 16)
            assert n == 4 and r.ok == [True, True, False, True]
            assert np.array_equal(page(11), want[3])
            # Token indices that are not a page's first, or past the pool: caller errors.
            with pytest.raises(ValueError, match="does not start"):
                store.batch_get_rows(keys[:1], [1, 2], 2, first, stride, sizes, 16)
            with pytest.raises(ValueError, match="does not start"):
                store.batch_get_rows(keys[:1], [32, 33], 2, first, stride, sizes, 16)
            with pytest.raises(ValueError, match="token indices"):
                store.batch_get_rows(keys, [0, 1], 2, first, stride, sizes, 16)


def test_tickets_keep_memory_alive_and_complete(store_dir):
    with make_store(store_dir) as store:
        pool = np.zeros(1 << 20, dtype=np.uint8)
        reg = store.register_memory(pool)
        pool[:65536] = pattern(65536, 4)
        keys = [f"t{i}" for i in range(16)]
        ticket = store.submit_put(keys, [pool[i * 4096:(i + 1) * 4096] for i in range(16)])
        assert ticket.wait(timeout=300.0)  # a ceiling for a hung ticket only
        assert ticket.done() and ticket.result().all_ok
        assert ticket.result().all_ok  # the result stays readable
        tickets = [store.submit_get(keys[i:i + 4],
                                    [pool[(100 + i + j) * 4096:(101 + i + j) * 4096]
                                     for j in range(4)]) for i in range(0, 16, 4)]
        assert all(t.result().all_ok for t in tickets)
        assert np.array_equal(pool[100 * 4096:116 * 4096], pool[:65536])
        # The flat pointer-list twins: each page as two pieces of 2 KiB.
        base = pool.ctypes.data
        ptrs = [base + i * 2048 for i in range(8)]
        put = store.submit_put_pieces([f"f{i}" for i in range(4)], ptrs, [2048] * 8)
        assert put.result().all_ok
        dst = [base + 200 * 4096 + i * 2048 for i in range(8)]
        got = store.submit_get_pieces([f"f{i}" for i in range(4)] + ["absent"],
                                      dst + [base + 240 * 4096, base + 241 * 4096],
                                      [2048] * 10)
        r = got.result()
        assert r.ok == [True, True, True, True, False] and r.pages[4].code == "NOT_FOUND"
        assert np.array_equal(pool[200 * 4096:202 * 4096], pool[:2 * 4096])
        with pytest.raises(kvtier.InvalidArgumentError):
            store.submit_get_pieces(["f0"], [base], [2048, 2048])
        reg.release()


def test_gil_is_released_during_io(store_dir):
    """With a switch interval longer than the test, the main thread can run only while the
    worker is inside a store call that let go of the GIL, or once the worker is done. The worker
    calls again until the main thread has looked: an event, not a time, so a loaded machine that
    schedules the main thread late costs rounds, not the result. The 100 rounds only end a
    worker whose calls hold the GIL; the main thread then finds it done."""
    with make_store(store_dir) as store:
        pool = np.zeros(128 << 20, dtype=np.uint8)
        with store.register_memory(pool):
            keys = [f"g{i}" for i in range(128)]
            pages = [pool[i << 20:(i + 1) << 20] for i in range(128)]
            entered = threading.Event()  # set once, before the first call
            in_call = threading.Event()  # set while the worker is in its store calls
            looked = threading.Event()
            seen_in_call = []

            def worker():
                in_call.set()
                entered.set()
                for _ in range(100):
                    store.batch_put(keys, pages)
                    store.batch_get(keys, pages)
                    if looked.is_set():
                        break
                in_call.clear()

            old = sys.getswitchinterval()
            sys.setswitchinterval(1e6)  # no forced switch while the test runs
            try:
                t = threading.Thread(target=worker)
                t.start()
                started = entered.wait(timeout=300)  # a ceiling for a hung worker only
                seen_in_call.append(in_call.is_set())
                looked.set()
                t.join()
            finally:
                sys.setswitchinterval(old)
            assert started and seen_in_call == [True]


def test_closing_releases_every_descriptor(store_dir):
    before = open_fds()
    store = make_store(store_dir)
    pool = np.zeros(1 << 20, dtype=np.uint8)
    reg = store.register_memory(pool)
    keys = [f"f{i}" for i in range(64)]
    pages = [pool[i * 8192:(i + 1) * 8192] for i in range(64)]
    during = open_fds()
    for _ in range(3):
        assert store.batch_put(keys, pages).all_ok
        assert open_fds() == during
        assert store.batch_get(keys, pages).all_ok
        assert open_fds() == during
    reg.release()
    store.close()
    store.close()  # idempotent
    assert open_fds() == before


def test_clear_is_scoped_to_the_namespace(store_dir):
    a = make_store(store_dir, model="a")
    b = make_store(store_dir, model="b")
    assert a.namespace_id != b.namespace_id
    mem_a = np.zeros(4096, dtype=np.uint8)
    mem_b = np.ones(4096, dtype=np.uint8)
    with a.register_memory(mem_a), b.register_memory(mem_b):
        assert a.put("k", mem_a[:100])
        assert b.put("k", mem_b[:50])
        assert a.clear()
        assert not a.exists("k") and b.exists("k")
        assert b.get("k", mem_b[1000:1050])
    a.close()
    b.close()


def test_agent_registration_target_transfer(tmp_path):
    before = open_fds()
    agent = kvtier.Agent(backend="posix")
    assert agent.backend == "posix" and "posix" in agent.description
    mem = np.zeros(1 << 16, dtype=np.uint8)
    mem[:8192] = pattern(8192, 5)
    reg = agent.register_memory(mem)
    path = str(tmp_path / "obj")
    target = agent.open_target(path, mode="create", size_hint=8192)
    xfer = agent.make_request("write", [mem[:4096], mem[4096:8192]],
                              [(target, 0, 4096), (target, 4096, 4096)])
    assert xfer.state == "prepared" and len(xfer) == 2
    assert xfer.post()
    assert xfer.wait(timeout=300.0) and xfer.done()  # the ceiling fails a hang only
    assert [s.ok for s in xfer.results] == [True, True] and xfer.first_error
    assert not os.path.exists(path)  # invisible until published
    assert target.publish()
    assert os.path.getsize(path) == 8192
    target.close()
    reader = agent.open_target(path)
    assert reader.size == 8192
    back = agent.make_request("read", [mem[16384:24576]], [(reader, 0, 8192)])
    back.post()
    back.wait()
    assert back.first_error.ok
    assert np.array_equal(mem[16384:24576], mem[:8192])
    with pytest.raises(ValueError):
        agent.make_request("read", [np.zeros(16, dtype=np.uint8)], [(reader, 0, 16)])
    with pytest.raises(kvtier.StorageError) as e:
        agent.open_target(str(tmp_path / "missing"))
    assert e.value.code == "NOT_FOUND"
    del back, xfer
    reader.close()
    reg.release()
    del agent
    assert open_fds() == before
