"""kvtier.vllm_tier.KvtierTier driven as vLLM's tiering manager drives a secondary tier
(vllm/v1/kv_offload/tiering/manager.py at vllm-project/vllm@cda0f3248538da3cc96b3760fe4cfaa7d3d652b9:
one job id counter for every tier, each job reported once, successful_keys a subset of the
job's keys, drain_jobs before a reset), with vLLM's types from python/tests/vllm_fakes."""

import mmap
import os
import subprocess
import sys
import time

import numpy
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "vllm_fakes"))

import vllm_variants  # noqa: E402
from conftest import du, open_fds, s3_test_server  # noqa: E402
from vllm.v1.kv_offload import base as vbase  # noqa: E402
from vllm.v1.kv_offload import config as vconfig  # noqa: E402
from vllm.v1.kv_offload.tiering import base as tbase  # noqa: E402

import kvtier  # noqa: E402
from kvtier import _vllm_api, vllm_tier  # noqa: E402

ROWS = 64
ROW_BYTES = 64 << 10  # one chunk, every worker's pages
LAYERS = tuple(f"model.layers.{i}.self_attn.attn" for i in range(4))


def make_spec(model="meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16", tp=1, events=False):
    parallel = vconfig.OffloadingParallelConfig(
        rank=0, world_size=tp, tp_size=tp, pp_size=1, pcp_size=1, dcp_size=1,
        data_parallel_index=0, is_parallelism_agnostic=False)
    config = vconfig.OffloadingConfig(
        groups=(vconfig.OffloadingGroupConfig(tokens_per_block=16, layer_names=LAYERS),),
        worker_kv_bytes_per_block=ROW_BYTES // 4 // tp, enable_kv_cache_events=events,
        extra_config={}, engine_id="engine-0", model=vconfig.OffloadingModelConfig(model, dtype),
        cache=vconfig.OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=4),
        parallel=parallel)
    return vbase.OffloadingSpec(config)


def primary(rows=ROWS, row_bytes=ROW_BYTES):
    """The CPU tier's buffer as vLLM hands it to tiers: numpy int8 rows over a shared mapping
    (vllm/v1/kv_offload/cpu/shared_offload_region.py at
    vllm-project/vllm@46bea23c: an mmap of /dev/shm, so page-aligned), as a memoryview."""
    region = mmap.mmap(-1, rows * row_bytes)
    array = numpy.frombuffer(region, dtype=numpy.int8).reshape(rows, row_bytes)
    return array, memoryview(array)


def keys_for(prefix, n, group=0):
    return [vbase.make_offload_key(f"{prefix}-{i}".encode().ljust(32, b"\0"), group)
            for i in range(n)]


def fill(array, rows, seed):
    rng = numpy.random.default_rng(seed)
    for r in rows:
        array[r] = rng.integers(-128, 127, array.shape[1], dtype=numpy.int8)


class Manager:
    """What the tiering manager does with a tier's jobs (ids, the checks on each result)."""

    def __init__(self, tier):
        self.tier = tier
        self.next_id = 0
        self.jobs = {}

    def submit(self, keys, rows, load):
        job = tbase.TransferJob(job_id=self.next_id, keys=list(keys),
                                chunk_ids=numpy.array(rows, dtype=numpy.int32),
                                is_promotion=load, req_context=vbase.ReqContext(req_id="r"))
        self.next_id += 1
        self.jobs[job.job_id] = job
        (self.tier.submit_load if load else self.tier.submit_store)(job)
        return job.job_id

    def finished(self):
        """Drains the tier and returns {job_id: JobResult} of what it reported."""
        self.tier.drain_jobs()
        out = {}
        for result in self.tier.get_finished_jobs():
            assert result.job_id in self.jobs, f"unknown or repeated job {result.job_id}"
            job = self.jobs.pop(result.job_id)
            if result.successful_keys is not None:
                assert set(result.successful_keys) <= set(job.keys)
            out[result.job_id] = result
        return out

    def lookup(self, key):
        """lookup as vLLM asks it: again on later steps while the answer is RETRY."""
        for _ in range(10):
            answer = self.tier.lookup(key, vbase.ReqContext(req_id="r"))
            if answer is not vbase.LookupResult.RETRY:
                return answer
            self.tier.on_schedule_end(vbase.ScheduleEndContext((), ()))
            assert self.tier.wait_lookups(timeout=60)
        raise AssertionError("still RETRY after 10 steps")


@pytest.fixture(params=["files", "segments"])
def layout(request):
    return request.param


def make_tier(view, root, layout="auto", spec=None, **options):
    return vllm_tier.KvtierTier(spec or make_spec(), view, "KvtierTier", root=root,
                                layout=layout, **options)


def test_the_tier_is_the_class_vllm_loads(store_dir):
    # The factory asserts issubclass(cls, SecondaryTierManager) and passes only keywords.
    assert issubclass(vllm_tier.KvtierTier, tbase.SecondaryTierManager)
    assert vllm_tier.KvtierTier.medium is vbase.Medium.STORAGE
    array, view = primary()
    tier = vllm_tier.KvtierTier(offloading_spec=make_spec(), primary_kv_view=view,
                                tier_type="KvtierTier", root=store_dir,
                                backpressure_detector=None, primary_pinning=None)
    try:
        assert tier.block_size_bytes == ROW_BYTES
        assert tier.on_new_request(vbase.ReqContext("r")).policy is vbase.OffloadPolicy.CHUNK_LEVEL
        assert not tier.has_pending_work()
    finally:
        tier.shutdown()


def test_store_lookup_load_round_trip(store_dir, layout):
    array, view = primary()
    tier = make_tier(view, store_dir, layout)
    m = Manager(tier)
    try:
        keys = keys_for("rt", 16)
        fill(array, range(16), seed=1)
        expected = array[:16].copy()
        job = m.submit(keys, range(16), load=False)
        results = m.finished()
        assert results[job].success and results[job].transfer_bytes == 16 * ROW_BYTES
        array[:] = 0
        assert all(m.lookup(k) is vbase.LookupResult.HIT for k in keys)
        assert m.lookup(keys_for("never", 1)[0]) is vbase.LookupResult.MISS
        # Into other rows, as the CPU tier reserves them.
        job = m.submit(keys, range(32, 48), load=True)
        results = m.finished()
        assert results[job].success and results[job].successful_keys is None
        assert numpy.array_equal(array[32:48], expected)
        assert tier.counters()["store"]["layout"].startswith(layout)
        # Rows are page-aligned and 64 KiB: direct I/O where the filesystem takes it.
        direct = tier.counters()["store"]["direct_io"]
        assert direct.startswith("auto (") or direct.startswith("off:"), direct
        if direct.startswith("auto ("):  # in place: no staging copy
            stats = tier.counters()["store"]
            assert stats["direct_pages"] == 32 and stats["staged_pages"] == 0, stats
    finally:
        tier.shutdown()


def test_a_chunk_stored_after_a_miss_is_a_hit_at_once(store_dir):
    """vLLM asks, the tier misses (storage said absent), vLLM computes and stores the chunk:
    the next lookup is a hit, not the remembered miss (lookup_retry_ms is long here)."""
    array, view = primary()
    tier = make_tier(view, store_dir, lookup_retry_ms=600000)
    m = Manager(tier)
    try:
        key = keys_for("later", 1)
        assert m.lookup(key[0]) is vbase.LookupResult.MISS
        fill(array, range(1), seed=5)
        job = m.submit(key, range(1), load=False)
        assert m.finished()[job].success
        assert m.lookup(key[0]) is vbase.LookupResult.HIT
    finally:
        tier.shutdown()


def test_stores_skip_chunks_the_tier_holds(store_dir):
    array, view = primary()
    tier = make_tier(view, store_dir)
    m = Manager(tier)
    try:
        keys = keys_for("dup", 8)
        fill(array, range(8), seed=2)
        m.submit(keys[:4], range(4), load=False)
        m.finished()
        # Stores are write-through: every chunk comes again. Only the new ones move.
        job = m.submit(keys, range(8), load=False)
        result = m.finished()[job]
        assert result.success and result.transfer_bytes == 4 * ROW_BYTES
        assert tier.counters()["store_skipped"] == 4
        assert tier.counters()["store"]["put_pages"] == 8
    finally:
        tier.shutdown()


def test_chunks_another_process_stored_are_retry_then_hit(store_dir, layout):
    array, view = primary()
    writer = make_tier(view, store_dir, layout)
    reader = make_tier(memoryview(numpy.zeros((ROWS, ROW_BYTES), numpy.int8)), store_dir, layout)
    try:
        keys = keys_for("other", 4)
        fill(array, range(4), seed=3)
        Manager(writer).submit(keys, range(4), load=False)
        Manager(writer).tier.drain_jobs()
        writer.get_finished_jobs()
        # The reader's index has not seen them: RETRY while storage is asked, then HIT.
        first = reader.lookup(keys[0], vbase.ReqContext("r"))
        assert first in (vbase.LookupResult.RETRY, vbase.LookupResult.HIT)
        m = Manager(reader)
        assert all(m.lookup(k) is vbase.LookupResult.HIT for k in keys)
        job = m.submit(keys, range(10, 14), load=True)
        assert m.finished()[job].success
        assert numpy.array_equal(numpy.asarray(reader._view)[10:14], array[:4])
    finally:
        writer.shutdown()
        reader.shutdown()


def test_a_damaged_chunk_is_a_failed_key_never_bytes(store_dir):
    array, view = primary()
    # The failed key is remembered as a miss for lookup_retry_ms: long here, so that the last
    # lookup asks within it however slow the machine.
    tier = make_tier(view, store_dir, "files", lookup_retry_ms=600000)
    m = Manager(tier)
    try:
        keys = keys_for("bad", 4)
        fill(array, range(4), seed=4)

        def files():
            return {os.path.join(d, f) for base in tier._store.namespace_dirs
                    for d, _, names in os.walk(base) for f in names}

        m.submit([keys[0], keys[2], keys[3]], [0, 2, 3], load=False)
        m.finished()
        before = files()
        m.submit([keys[1]], [1], load=False)
        m.finished()
        paths = sorted(files() - before)  # the second chunk's page file
        assert len(paths) == 1, paths
        # Flip a byte in the middle of its payload.
        with open(paths[0], "r+b") as f:
            f.seek(os.path.getsize(paths[0]) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        job = m.submit(keys, range(40, 44), load=True)
        result = m.finished()[job]
        assert not result.success
        assert list(result.successful_keys) == [keys[0], keys[2], keys[3]]
        for i in (0, 2, 3):
            assert numpy.array_equal(array[40 + i], array[i])
        # Not offered again at once (no promotion retried every step).
        assert tier.lookup(keys[1], vbase.ReqContext("r")) is vbase.LookupResult.MISS
    finally:
        tier.shutdown()


def test_another_tp_size_dtype_or_model_is_a_miss(store_dir):
    array, view = primary()
    tier = make_tier(view, store_dir)
    m = Manager(tier)
    keys = keys_for("geo", 2)
    fill(array, range(2), seed=5)
    m.submit(keys, range(2), load=False)
    m.finished()
    namespace = tier.namespace
    tier.shutdown()
    for spec in (make_spec(tp=2), make_spec(dtype="float16"), make_spec(model="other/model")):
        other = make_tier(memoryview(numpy.zeros((ROWS, ROW_BYTES), numpy.int8)), store_dir,
                          spec=spec)
        try:
            assert other.namespace != namespace
            assert Manager(other).lookup(keys[0]) is vbase.LookupResult.MISS
        finally:
            other.shutdown()


def test_unknown_or_malformed_options_fail_start_naming_them(store_dir):
    _, view = primary()
    with pytest.raises(ValueError, match="capacty_bytes"):
        make_tier(view, store_dir, capacty_bytes="1GiB")
    with pytest.raises(ValueError, match="capacity_bytes"):
        make_tier(view, store_dir, capacity_bytes="lots")
    with pytest.raises(ValueError, match="layout"):
        make_tier(view, store_dir, layout="striped")
    with pytest.raises(ValueError, match="deadline_ms"):
        make_tier(view, store_dir, deadline_ms="soon")
    with pytest.raises(ValueError, match="direct_io"):
        make_tier(view, store_dir, direct_io="always")
    with pytest.raises(ValueError, match="root"):
        vllm_tier.KvtierTier(make_spec(), view, "KvtierTier")


def test_drain_jobs_waits_for_every_job_and_each_is_reported_once(store_dir):
    array, view = primary()
    tier = make_tier(view, store_dir)
    m = Manager(tier)
    try:
        fill(array, range(ROWS), seed=6)
        ids = [m.submit(keys_for(f"drain{j}", 8), range(8 * j, 8 * j + 8), load=False)
               for j in range(8)]
        tier.drain_jobs()
        assert not any(j.ticket is not None and not j.ticket.done()
                       for j in tier._jobs.values())
        results = m.finished()
        assert sorted(results) == ids and all(r.success for r in results.values())
        assert list(tier.get_finished_jobs()) == []
        assert not tier.has_pending_work()
    finally:
        tier.shutdown()


def test_capacity_bounds_the_tier_and_evicts_the_oldest(store_dir):
    array, view = primary()
    # Room for 24 chunk files (a 4 KiB header each) beside what the tier keeps.
    capacity = kvtier.capacity_holding(24 * kvtier.capacity_page_bytes(ROW_BYTES + 4096))
    tier = make_tier(view, store_dir, "files", capacity_bytes=str(capacity))
    m = Manager(tier)
    try:
        fill(array, range(ROWS), seed=7)
        for j in range(6):  # 48 chunks into room for about 24
            m.submit(keys_for(f"cap{j}", 8), range(8 * j, 8 * j + 8), load=False)
            assert all(r.success for r in m.finished().values())
        stats = tier.counters()["store"]
        assert stats["used_bytes"] + stats["metadata_bytes"] <= capacity
        assert stats["evicted_pages"] == 48 - 24
        assert Manager(tier).lookup(keys_for("cap0", 1)[0]) is vbase.LookupResult.MISS
        assert Manager(tier).lookup(keys_for("cap5", 1)[0]) is vbase.LookupResult.HIT
    finally:
        tier.shutdown()


def test_metrics_in_vllms_terms(store_dir):
    # vLLM registers what build_metric_definitions names and fails on a name it did not
    # (OffloadPromMetrics._get_prometheus_metric at vllm-project/vllm@055e47c2); counters are
    # per interval (absent when nothing moved), gauges the state now.
    definitions = vllm_tier.KvtierTier.build_metric_definitions({"type": "KvtierTier"})
    p = "vllm:kv_offload_kvtier_"
    assert isinstance(definitions[p + "load_bytes"], vbase.OffloadingCounterMetadata)
    assert isinstance(definitions[p + "cache_bytes"], vbase.OffloadingGaugeMetadata)
    array, view = primary()
    tier = make_tier(view, store_dir)
    m = Manager(tier)
    try:
        keys = keys_for("metrics", 8)
        fill(array, range(8), seed=10)
        m.submit(keys, range(8), load=False)
        m.finished()
        m.submit(keys[:4], range(4), load=False)  # held: skipped
        m.finished()
        absent = keys_for("metrics-absent", 1)
        m.submit(keys[:4] + absent, range(20, 25), load=True)
        m.finished()
        stats = tier.get_stats().reduce()
        assert set(stats) <= set(definitions)
        assert stats[p + "store_chunks"] == 8 and stats[p + "store_bytes"] == 8 * ROW_BYTES
        assert stats[p + "store_skipped"] == 4
        assert stats[p + "load_chunks"] == 4 and stats[p + "load_bytes"] == 4 * ROW_BYTES
        assert stats[p + "load_missing"] == 1 and p + "load_faults" not in stats
        assert stats[p + "load_time"] > 0 and stats[p + "store_time"] > 0
        assert stats[p + "cache_chunks"] == 8 and stats[p + "jobs_in_flight"] == 0
        again = tier.get_stats().reduce()
        assert p + "store_chunks" not in again and again[p + "cache_chunks"] == 8
    finally:
        tier.shutdown()


def test_a_restarted_engine_finds_what_an_earlier_one_stored(store_dir, layout):
    array, view = primary()
    fds = open_fds()
    tier = make_tier(view, store_dir, layout)
    keys = keys_for("restart", 8)
    fill(array, range(8), seed=8)
    m = Manager(tier)
    m.submit(keys, range(8), load=False)
    m.finished()
    tier.shutdown()
    assert open_fds() == fds
    expected = array[:8].copy()
    array[:] = 0
    again = make_tier(view, store_dir, layout)
    try:
        m = Manager(again)
        assert all(m.lookup(k) is vbase.LookupResult.HIT for k in keys)
        job = m.submit(keys, range(8), load=True)
        assert m.finished()[job].success
        assert numpy.array_equal(array[:8], expected)
    finally:
        again.shutdown()
    assert open_fds() == fds


def test_stored_events_when_vllm_asks_for_them(store_dir):
    array, view = primary()
    tier = make_tier(view, store_dir, spec=make_spec(events=True))
    m = Manager(tier)
    try:
        keys = keys_for("ev", 3)
        fill(array, range(3), seed=9)
        m.submit(keys, range(3), load=False)
        m.finished()
        events = list(tier.take_events())
        assert len(events) == 1
        assert events[0].keys == keys and not events[0].removed
        assert events[0].medium is vbase.Medium.STORAGE
        assert list(tier.take_events()) == []
    finally:
        tier.shutdown()


def test_capacity_bytes_bounds_the_whole_tree_as_du_counts_it(store_dir, layout):
    # capacity_bytes is what the tree under the root takes (st_blocks, as du counts it), chunks
    # and what kvtier keeps beside them, within one chunk, from the smallest capacity accepted
    # up; one below that is refused, saying why.
    array, view = primary()
    fill(array, range(ROWS), seed=12)
    chunk = kvtier.capacity_page_bytes(ROW_BYTES + 4096)
    smallest = kvtier.capacity_holding(chunk, layout)
    with pytest.raises(kvtier.InvalidArgumentError, match=f"at least {smallest}"):
        make_tier(view, store_dir + "-small", layout, capacity_bytes=smallest - 1)
    for capacity in (smallest, 2 * smallest, 8 << 20):
        root = f"{store_dir}-{capacity}"
        tier = make_tier(view, root, layout, capacity_bytes=capacity)
        m = Manager(tier)
        try:
            room = capacity - tier._store.stats()["metadata_bytes"]
            per_job = max(1, min(8, room // chunk // 4))
            for j in range(3 * capacity // chunk // per_job + 1):
                rows = [(j * per_job + i) % ROWS for i in range(per_job)]
                m.submit(keys_for(f"du{j}", per_job), rows, load=False)
                m.finished()
            stats = tier._store.stats()
        finally:
            tier.shutdown()
        assert stats["evicted_pages"] > 0 and stats["pages"] > 0, stats
        assert stats["used_bytes"] + stats["metadata_bytes"] <= capacity
        assert du(root) <= capacity + chunk, (layout, capacity, du(root))


def test_eviction_events_under_a_capacity(store_dir, layout):
    # vLLM's KV events: a chunk reported stored and later evicted by kvtier is reported
    # removed, once; what is still held is never reported removed.
    array, view = primary()
    capacity = kvtier.capacity_holding(28 * ROW_BYTES, layout)
    tier = make_tier(view, store_dir, layout, spec=make_spec(events=True),
                     capacity_bytes=capacity)
    m = Manager(tier)
    try:
        fill(array, range(ROWS), seed=11)
        stored, removed = [], []
        for j in range(12):  # 96 chunks into room for about 24
            m.submit(keys_for(f"evict{j}", 8), range(8 * (j % 8), 8 * (j % 8) + 8), load=False)
            assert all(r.success for r in m.finished().values())
            for event in tier.take_events():
                assert event.medium is vbase.Medium.STORAGE
                (removed if event.removed else stored).extend(event.keys)
        assert len(stored) == 96 and len(set(stored)) == 96
        assert removed and len(set(removed)) == len(removed) and set(removed) <= set(stored)
        held = [k for k in stored if k not in set(removed)]
        stats = tier._store.stats()
        assert stats["used_bytes"] + stats["metadata_bytes"] <= capacity
        ctx = vbase.ReqContext("r")
        for key in removed:
            assert tier.lookup(key, ctx) is not vbase.LookupResult.HIT
        assert sum(tier.lookup(k, ctx) is vbase.LookupResult.HIT for k in held) == len(held)
    finally:
        tier.shutdown()


def test_a_hung_mount_never_blocks_the_scheduler(hangfs):
    """vLLM #54363: its file tier blocks on a hung mount. Here, with the mount's server gone
    (kvtier_hangfs, hung on command), every scheduler-thread call returns without waiting
    for storage, the jobs in flight fail by deadline_ms (drain_jobs returns), no late read
    reaches vLLM's rows, and the tier serves again once the mount answers."""
    array, view = primary()
    tier = make_tier(view, os.path.join(hangfs.mount, "kv"), deadline_ms=400)
    m = Manager(tier)
    ctx = vbase.ReqContext("r")
    try:
        assert "fuse" in tier.counters()["store"]["isolation"]
        keys = keys_for("hung", 8)
        fill(array, range(8), seed=12)
        expected = array[:8].copy()
        m.submit(keys, range(8), load=False)
        assert all(r.success for r in m.finished().values())
        array[8:16] = 7

        hangfs.hang()
        calls = []

        def timed(call, *args):
            start = time.monotonic()
            out = call(*args)
            calls.append((getattr(call, "__name__", str(call)), time.monotonic() - start))
            return out

        load = timed(m.submit, keys, range(8, 16), True)
        timed(m.submit, keys_for("hung-new", 8), range(16, 24), False)
        assert timed(tier.lookup, keys[0], ctx) is vbase.LookupResult.HIT  # the index
        assert timed(tier.lookup, keys_for("hung-unknown", 1)[0], ctx) is \
            vbase.LookupResult.RETRY
        timed(tier.on_schedule_end, vbase.ScheduleEndContext((), ()))
        timed(tier.get_finished_jobs)
        timed(tier.has_pending_work)
        timed(tier.take_events)
        timed(tier.get_stats)
        slow = [(name, round(t, 3)) for name, t in calls if t > 0.2]
        assert not slow, slow  # none waited for storage (the deadline is 0.4 s)
        start = time.monotonic()
        results = m.finished()  # drain_jobs: by the deadline, not the mount
        assert time.monotonic() - start < 0.4 + 1.5
        assert not results[load].success and not results[load].successful_keys
        assert (array[8:16] == 7).all()  # no late read reached the rows
        assert tier.counters()["store"]["locations_unhealthy"] == 1

        hangfs.release()
        assert tier._store.wait_health(answering=True, timeout_s=120)
        assert (array[8:16] == 7).all()
        # The failed keys were misses for lookup_retry_ms; a new load of them reads them.
        job = m.submit(keys, range(8, 16), load=True)
        assert m.finished()[job].success
        assert numpy.array_equal(array[8:16], expected)
    finally:
        hangfs.release()
        tier.shutdown()


def test_importing_the_tier_needs_neither_vllm_nor_torch():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['vllm'] = None\n"
            "import kvtier.vllm_tier as t\n"
            "assert t.KvtierTier.__mro__[1] is object\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    env = dict(os.environ)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("kind", ["roots", "s3"])
def test_every_location_kind(tmp_path, monkeypatch, kind):
    """Several roots, and S3 on the test server (skipped, saying why, without one)."""
    if kind == "roots":
        options = {"root": ",".join(str(tmp_path / f"root{i}") for i in range(3))}
    else:
        endpoint, region, bucket = s3_test_server(monkeypatch)
        options = {"uri": f"s3://{bucket}/vllm-{os.getpid()}-{time.time_ns()}"
                          f"?endpoint={endpoint}&region={region}&deadline_ms=300000"}
    array, view = primary()
    tier = vllm_tier.KvtierTier(make_spec(), view, "KvtierTier", **options)
    m = Manager(tier)
    try:
        keys = keys_for("kinds", 12)
        fill(array, range(12), seed=10)
        expected = array[:12].copy()
        job = m.submit(keys, range(12), load=False)
        assert m.finished()[job].success
        array[:12] = 0
        assert all(m.lookup(k) is vbase.LookupResult.HIT for k in keys)
        job = m.submit(keys, range(12), load=True)
        assert m.finished()[job].success
        assert numpy.array_equal(array[:12], expected)
    finally:
        tier.shutdown()


@pytest.mark.parametrize("variant", vllm_variants.JOB_RESULTS, ids=lambda c: c.__name__)
def test_job_results_and_events_of_other_vllms_are_built_as_they_define_them(
        store_dir, monkeypatch, variant):
    # As the tier finds them when it loads (kvtier._vllm_api.Shape of vLLM's classes).
    monkeypatch.setattr(_vllm_api, "job_result",
                        _vllm_api.Shape(variant, {"transfer_bytes": "transfer_size"}))
    monkeypatch.setattr(_vllm_api, "offloading_event",
                        _vllm_api.Shape(vllm_variants.OffloadingEventWithoutOwnership))
    array, view = primary()
    tier = make_tier(view, store_dir, spec=make_spec(events=True))
    m = Manager(tier)
    try:
        keys = keys_for("fork", 4)
        fill(array, range(4), seed=3)
        expected = array[:4].copy()
        job = m.submit(keys, range(4), load=False)
        stored = m.finished()[job]
        assert type(stored) is variant and stored.success
        if hasattr(stored, "transfer_size"):
            assert stored.transfer_size == 4 * ROW_BYTES
        events = list(tier.take_events())
        assert [type(e) for e in events] == [vllm_variants.OffloadingEventWithoutOwnership]
        assert events[0].keys == keys and not events[0].removed
        # A promotion with a key never stored: a failed job naming the keys that moved.
        job = m.submit(keys + keys_for("absent", 1), range(8, 13), load=True)
        loaded = m.finished()[job]
        assert type(loaded) is variant and not loaded.success
        assert list(loaded.successful_keys) == keys
        assert numpy.array_equal(array[8:12], expected)
    finally:
        tier.shutdown()


def test_a_vllm_with_another_tier_api_fails_at_start_saying_so(store_dir, monkeypatch):
    monkeypatch.setattr(vllm_tier, "_API_PROBLEM", "this vLLM's SecondaryTierManager lacks "
                        "get_finished_jobs")
    _, view = primary()
    with pytest.raises(RuntimeError, match="lacks get_finished_jobs"):
        make_tier(view, store_dir)


def test_a_reader_and_a_writer_at_once_never_see_wrong_bytes(store_dir, layout):
    """Two engines on one location: while one stores, the other looks up and loads what it
    finds; every chunk it loads is byte-exact (counts, not time: see writer_and_reader)."""
    src, src_view = primary()
    dst, dst_view = primary()
    fill(src, range(ROWS), seed=11)
    writer = make_tier(src_view, store_dir, layout)
    reader = make_tier(dst_view, store_dir, layout)
    w, r = Manager(writer), Manager(reader)
    keys = keys_for("both", ROWS)

    def write(n):
        if n >= ROWS // 8:
            return None
        job = w.submit(keys[8 * n:8 * n + 8], range(8 * n, 8 * n + 8), load=False)
        return None if w.finished()[job].success else f"store {n} failed"

    def read(n):
        i = n % ROWS
        if r.lookup(keys[i]) is not vbase.LookupResult.HIT:
            return None
        job = r.submit([keys[i]], [i], load=True)
        if r.finished()[job].success and not numpy.array_equal(dst[i], src[i]):
            return f"chunk {i}: wrong bytes"
        return None

    from conftest import writer_and_reader
    try:
        assert writer_and_reader(write, read, ROWS // 8, last_rounds=ROWS) == []
    finally:
        writer.shutdown()
        reader.shutdown()
    # Once written, every chunk is found and byte-exact (a new engine: the reader's misses
    # during the writes are remembered for lookup_retry_ms).
    dst[:] = 0
    again = make_tier(dst_view, store_dir, layout)
    try:
        m = Manager(again)
        assert all(m.lookup(k) is vbase.LookupResult.HIT for k in keys)
        job = m.submit(keys, range(ROWS), load=True)
        assert m.finished()[job].success
        assert numpy.array_equal(dst, src)
    finally:
        again.shutdown()
