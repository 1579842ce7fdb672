#!/usr/bin/env python3
"""kvtier's SGLang adapter against SGLang's `fast_file` HiCache backend, side by side, through
SGLang's own calls (batch_set_v1, batch_exists, batch_get_v1), in one run.

The peer is the `fast_file` backend of the open pull request sgl-project/sglang#39880 ("[HiCache]
Add fast_file local storage backend"): vectored readv/writev between page-first host pool memory
and one file per page, atomic publication (temporary file + rename), separate read and write
thread pools (extra-config keys `read_workers`, `write_workers`, default 1 each). Its code is
never part of this repository: --peer DIR names a checkout (or partial checkout) of sglang's
`python/` tree, which is put first on sys.path, and the backend is imported from there:

  git clone https://github.com/sgl-project/sglang && cd sglang
  git fetch origin pull/39880/head
  git checkout 65cb6108c012ddface2275a0bf6273ed9b16980c   # or FETCH_HEAD; record which
  ... --peer sglang/python

Measured against copies of these files of sgl-project/sglang, python/sglang/srt/mem_cache/
(at commits that carry the PR's fast_file code), written unedited to /tmp/peer/python (a
partial checkout, no __init__.py above fast_file/):
  storage/fast_file/fast_file_store.py   65cb6108c012ddface2275a0bf6273ed9b16980c
  storage/fast_file/lru_file_evictor.py  a71c281449420dab12cbd1a61128e53337d8d9a1
  storage/fast_file/__init__.py          68c8202e5ea82d1389e27045c92ecf5f3831bf87
  hicache_storage.py                     a71c281449420dab12cbd1a61128e53337d8d9a1
(fast_file_store.py sha256 be12efdf5576b8a44680af6501871875c0511d74180aa5af957f39e7cb5cec01;
the two a71c2814 files are the nearest stored versions, 65cb6108's own were not at hand).
fast_file_store.py @65cb6108 is the newest version with both read_workers and write_workers
whose imports could all be had: the PR's later head adds a list of storage roots
(`storage_dir` as a list, DiskRouter/StripedEvictor in a lru_file_evictor.py that was not
available) and routes each page file through the router; with one root its per-page I/O path
(_transfer_pages, _read_page_buffers, _write_page_buffers, _map_on) is the same code. The
evictor is inert here (no max_size, no min_free_space: reserve() admits, touch() returns; at
start it scans the new, empty directory for stale temporary files), and
hicache_storage.py supplies only HiCacheFile's key helpers (_build_config_suffix,
_get_suffixed_key, _log_key), the base class and the config dataclass. The run prints the
checkout's commit (where DIR is in a git work tree) and the sha256 of fast_file_store.py.

Stand-ins: SGLang itself is not installed here (only torch and numpy are), so a module that
fails to import from DIR is replaced in sys.modules by a small stand-in, and only then; the run
lists which were used. None is on fast_file's I/O path:
  - sglang.srt.environ: `envs.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR`, declared EnvStr(None)
    in python/sglang/srt/environ.py, read from the environment as its EnvField.get does
    (sgl-project/sglang@0003215cf1464f44b389cd0b18d0b4c56f2a3da6); fast_file reads it only
    when the extra config has no storage_dir, and this bench always sets one. (The real module
    is stdlib only: a full checkout imports it.)
  - sglang.srt.utils.common: human_readable_int, SGLang's SI/IEC size parser ("200G", "1Gi");
    the evictor calls it only for string max_size/min_free_space, which this bench never sets.
    (The real module imports psutil, zmq, triton, PIL, ...; it cannot import here.)
  - a package that does not import (a full checkout's sglang/__init__.py imports the frontend
    language's dependencies; a partial checkout has no sglang/srt/utils/) becomes an empty
    package over the same directory, so that its submodules still import from DIR; its
    __init__ is not run. A partial checkout without __init__.py files above fast_file/ imports
    as namespace packages.
hicache_storage.py and the fast_file modules themselves are always SGLang's (the run stops if
they do not import from DIR).

Both backends are made as SGLang makes them and see the same host pool object:
  - fast_file as StorageBackendFactory._create_builtin_backend does
    (python/sglang/srt/mem_cache/storage/backend_factory.py @a71c2814):
    HiCacheFastFile(storage_config, mem_pool_host), then register_mem_pool_host(pool) as the
    cache controller does; extra config {"storage_dir": DIR, "read_workers": N,
    "write_workers": N} with N = the CPUs this process may use (len(os.sched_getaffinity(0))),
    and with --peer-defaults also {"storage_dir": DIR} alone (1 read + 1 write worker);
  - kvtier as SGLang's "dynamic" backend does: HiCacheKvtier(storage_config, {}), then
    register_mem_pool_host(pool); extra config {"uri": "file://DIR"} and nothing else, as a
    new user configures it (the file layout is left to the store; the table says which it took).
The storage config is the controller's (python/tests/sglang_fakes.py storage_config: TP 1,
model "test-model", MLA flag per shape), handed to fast_file as its own HiCacheStorageConfig
class. kvtier.sglang is imported after the peer's modules, so that HiCacheKvtier subclasses
SGLang's HiCacheStorage as it does inside SGLang.

The host pools are bench/sglang_vs_bench.py's (make_pool: tests' fakes.HostPool, memory
allocated as SGLang's alloc_mmap does, page_first layout as SGLang's controller stores it), with
one attribute added here: size_per_token, which SGLang's HostKVCache sets in __init__
(get_size_per_token(): MHA head_dim * head_num * layer_num * itemsize * 2, MLA kv_cache_dim *
itemsize * layer_num; python/sglang/srt/mem_cache/memory_pool_host.py, hzh0425/sglang@03855bd,
the file tests/fakes.py mirrors) and fast_file folds into its namespace name.

Method, as bench/sglang_vs_bench.py's (which this imports for its shapes, pools and memory
warm-up): every shape moves about --mib MiB of pages in --batch (128) page calls, SGLang's
STORAGE_BATCH_SIZE; one uncounted round warms both sides up, then --rounds rounds (at least 3)
alternate which side goes first. Every side of every round opens a new backend on a fresh
directory of its own, deleted once it has written and read (the next side starts with an empty
store and the pages before it freed). Per side: sglang_vs_bench's before_timed_write (sync,
touch and free --mib + 256 MiB, then the host pool read by the kernel and by user code), the
timed writes (batch_set_v1, every page reported True); batch_exists over each batch (timed
apart, reported in us/page; every key must be found); an untimed warm read through the side's
own batch_get_v1 into every slot of the pool, each slot given another page's bytes (keys
rotated by one page, so the pool holds none of the right bytes before the timed read); the
timed reads (batch_get_v1); then every page of the pool compared byte for byte with what was
written. GB/s = bytes / the time spent in the calls. The ratio is kvtier GB/s / fast_file GB/s,
per round; the table gives medians over the rounds (min-max of the per-round ratios), and beside
each ratio its target: writes >= 1.2x and reads >= 1.0x for page_size 64 shapes, >= 2x both ways
for the page_size 1 shapes ("met": the median ratio reaches it).

  PYTHONPATH=build/python /usr/bin/python3 bench/fast_file_compare.py --peer DIR
      [--shapes llama-ps64,qwen72b-tp8-ps64,mla-ps64,mla-ps1,llama-ps1] [--mib 512]
      [--rounds 3] [--batch 128] [--dir DIR] [--peer-defaults] [--no-warm-memory]
      [--no-warm-reads] [--json]

Shapes (page_first, bf16): llama-ps64 (Llama-3-8B, 8 MiB pages), qwen72b-tp8-ps64 (Qwen2.5-72B
at TP 8: 80 layers, 1 KV head of 128 per rank, 2.5 MiB pages), mla-ps64 (DeepSeek-V3 MLA,
4.29 MiB), mla-ps1 (68.6 KiB), llama-ps1 (128 KiB); any other name of sglang_vs_bench's SHAPES
of kind "kv" works too.
"""

import argparse
import dataclasses
import hashlib
import importlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULT_SHAPES = "llama-ps64,qwen72b-tp8-ps64,mla-ps64,mla-ps1,llama-ps1"
FF_MODULE = "sglang.srt.mem_cache.storage.fast_file.fast_file_store"
STAND_INS = []  # (module, what failed) for every stand-in installed
svb = None  # bench/sglang_vs_bench.py, imported after the peer (load_house)


# -- the peer's code, from --peer DIR --------------------------------------------------------

def _environ_stand_in(name):
    """Stand-in for sglang.srt.environ: the one variable fast_file reads, an EnvStr(None) as
    python/sglang/srt/environ.py (sgl-project/sglang@0003215c) declares it."""

    class EnvStr:
        def __init__(self, var, default):
            self.name, self.default = var, default

        def get(self):  # EnvField.get: unset -> the default, else the value as it is
            value = os.getenv(self.name)
            return self.default if value is None else value

    mod = types.ModuleType(name, "bench/fast_file_compare.py stand-in for " + name)
    mod.envs = types.SimpleNamespace(
        SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR=EnvStr(
            "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", None))
    return mod


def _common_stand_in(name):
    """Stand-in for sglang.srt.utils.common: human_readable_int, SGLang's SI/IEC size parser
    (python/sglang/srt/utils/common.py, the version the PR's evictor documents: "200G", "1Gi";
    no commit pinned), which the evictor calls for string max_size/min_free_space only."""

    def human_readable_int(value):
        value = value.strip()
        si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
        if match:
            number, suffix = match.groups()
            if suffix in iec:
                if "." in number:
                    raise argparse.ArgumentTypeError(f"no decimals with {suffix}")
                return int(number) * iec[suffix]
            return int(Decimal(number) * si[suffix])
        try:
            return int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"Invalid integer value: '{value}'")

    mod = types.ModuleType(name, "bench/fast_file_compare.py stand-in for " + name)
    mod.human_readable_int = human_readable_int
    return mod


def _forget(name):
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def _import_or_stand_in(name, make, peer):
    """`name` imported from the checkout, or, where that fails, make(name) installed in its
    place (and its parent packages, as empty packages over the checkout's directories)."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failure: a stand-in, listed in the output
        _forget(name)
        parent, _, leaf = name.rpartition(".")
        if parent:
            _import_or_stand_in(parent, lambda p: _package_shell(p, peer), peer)
        mod = make(name)
        sys.modules[name] = mod
        if parent:
            setattr(sys.modules[parent], leaf, mod)
        STAND_INS.append((name, f"{type(exc).__name__}: {exc}"))
        return mod


def _package_shell(name, peer):
    """An empty package over the checkout's directory of `name`: its __init__ not run."""
    mod = types.ModuleType(name, "bench/fast_file_compare.py: empty package (its __init__ "
                                 "did not import)")
    path = os.path.join(peer, *name.split("."))
    mod.__path__ = [path] if os.path.isdir(path) else []
    return mod


def load_peer(peer):
    """Imports fast_file (and SGLang's hicache_storage) from the checkout `peer`."""
    peer = os.path.abspath(peer)
    if not os.path.isfile(os.path.join(peer, *FF_MODULE.split(".")) + ".py"):
        sys.exit(f"--peer {peer}: no {FF_MODULE.replace('.', '/')}.py there (a checkout of "
                 "sglang's python/ tree at sgl-project/sglang#39880)")
    sys.path.insert(0, peer)
    _forget("sglang")
    shell = lambda n: _package_shell(n, peer)  # noqa: E731
    for pkg in ("sglang", "sglang.srt"):
        _import_or_stand_in(pkg, shell, peer)
    _import_or_stand_in("sglang.srt.environ", _environ_stand_in, peer)
    _import_or_stand_in("sglang.srt.utils.common", _common_stand_in, peer)
    for pkg in ("sglang.srt.mem_cache", "sglang.srt.mem_cache.storage",
                "sglang.srt.mem_cache.storage.fast_file"):
        _import_or_stand_in(pkg, shell, peer)
    mods = {}
    for name in ("sglang.srt.mem_cache.hicache_storage", FF_MODULE):
        mods[name] = importlib.import_module(name)  # SGLang's own: never a stand-in
        where = os.path.abspath(mods[name].__file__)
        if not where.startswith(peer + os.sep):
            sys.exit(f"{name} came from {where}, not from --peer {peer}")
    ff_file = mods[FF_MODULE].__file__
    with open(ff_file, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    try:
        commit = subprocess.run(["git", "-C", peer, "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git work tree)"
    return types.SimpleNamespace(
        HiCacheFastFile=mods[FF_MODULE].HiCacheFastFile,
        HiCacheStorageConfig=mods["sglang.srt.mem_cache.hicache_storage"].HiCacheStorageConfig,
        dir=peer, file=ff_file, sha256=digest, commit=commit)


def load_house():
    """bench/sglang_vs_bench.py (and with it kvtier.sglang and the tests' fakes), imported
    after the peer so that kvtier's adapter finds SGLang's HiCacheStorage as inside SGLang."""
    global svb
    sys.path.insert(0, HERE)
    import sglang_vs_bench  # noqa: E402 - bench/sglang_vs_bench.py

    svb = sglang_vs_bench
    # Qwen2.5-72B at TP 8: 80 layers, 8 KV heads of 128 (GQA) -> 1 per rank, bf16.
    svb.SHAPES.setdefault("qwen72b-tp8-ps64", dict(svb.llama(64), layers=80, heads=1))
    assert svb.page_bytes_of(svb.SHAPES["qwen72b-tp8-ps64"]) == 5 << 19  # 2.5 MiB


# -- the two sides ---------------------------------------------------------------------------

def size_per_token(pool):
    """SGLang's HostKVCache.size_per_token (get_size_per_token()) for the fake pool."""
    item = pool.kv_buffer.element_size()
    if pool.mla:
        return pool.head_dim * item * pool.layer_num
    return pool.head_dim * pool.head_num * pool.layer_num * item * 2


class Kvtier:
    name = "kvtier"

    def open(self, directory, pool, mla):
        config = svb.storage_config(layout=pool.layout, mla=mla)
        config.extra_config = {"uri": f"file://{directory}"}
        b = svb.adapter_module.HiCacheKvtier(config, {})
        b.register_mem_pool_host(pool)
        return b

    @staticmethod
    def layout(b):
        return b._pools["kv"].stores[0].stats().get("layout") or "?"


class FastFile:
    def __init__(self, peer, workers=None):
        self.peer = peer
        self.workers = workers
        self.name = f"fast_file {workers or 1}r+{workers or 1}w" + \
            ("" if workers else " (defaults)")

    def open(self, directory, pool, mla):
        house = svb.storage_config(layout=pool.layout, mla=mla)
        config = self.peer.HiCacheStorageConfig(**{
            f.name: getattr(house, f.name)
            for f in dataclasses.fields(self.peer.HiCacheStorageConfig)})
        config.extra_config = {"storage_dir": directory}
        if self.workers:
            config.extra_config.update(read_workers=self.workers, write_workers=self.workers)
        b = self.peer.HiCacheFastFile(config, pool)
        b.register_mem_pool_host(pool)
        assert (b.read_workers, b.write_workers) == (self.workers or 1,) * 2
        assert all(b._pool_direct_io.values()), "fast_file took its staged path for this pool"
        return b

    @staticmethod
    def layout(b):
        return "files"


class Shape:
    """One shape's host pool, its reference bytes and its calls, shared by every side."""

    def __init__(self, name, mib, batch):
        self.name = name
        spec = svb.SHAPES[name]
        if spec.get("kind") != "kv":
            sys.exit(f"{name}: only KV shapes go through batch_set_v1/batch_get_v1")
        self.mla = spec.get("mla", False)
        self.page = svb.page_bytes_of(spec)
        self.pages = max(4, (mib << 20) // self.page)
        self.batch = min(batch, self.pages)
        self.small = spec["page_size"] == 1
        self.pool = svb.make_pool(spec, self.pages)
        self.pool.size_per_token = size_per_token(self.pool)
        self.pool.fill_random(7)
        self.memory = svb.pool_memory(self.pool)
        ps = self.pool.page_size
        self.reference = [self.pool.page_bytes(i * ps) for i in range(self.pages)]
        self.plan = []  # (first page, pages, host indices) of each call, made before timing
        for first in range(0, self.pages, self.batch):
            n = min(self.batch, self.pages - first)
            idx = svb.host_indices(range(first, first + n), ps) if ps > 1 else \
                svb.torch.arange(first, first + n)
            self.plan.append((first, n, idx))

    def targets(self):
        return {"write": 2.0, "read": 2.0} if self.small else {"write": 1.2, "read": 1.0}

    def run(self, side, directory, r, warm_reads):
        """One side's round: timed writes, batch_exists, warm reads, timed reads, byte
        check. Returns seconds per op and the side's file layout."""
        b = side.open(directory, self.pool, self.mla)
        try:
            keys = svb.keys_for(f"kv{r}", self.pages)
            times = {}
            svb.before_timed_write(self.memory)
            times["write"] = self._timed(b.batch_set_v1, keys, expect="all")
            times["exists"] = self._timed(b.batch_exists, keys, expect="count")
            if warm_reads:  # every slot gets another page's bytes, through the side's calls
                for first, n, idx in self.plan:
                    rotated = [keys[(first + j + 1) % self.pages] for j in range(n)]
                    assert all(b.batch_get_v1(rotated, idx)), (side.name, "warm read")
                assert not (self.pool.page_bytes(0) == self.reference[0]).all()
            times["read"] = self._timed(b.batch_get_v1, keys, expect="all")
            ps = self.pool.page_size
            for i in range(self.pages):  # untimed: every byte as written
                assert (self.pool.page_bytes(i * ps) == self.reference[i]).all(), \
                    (side.name, self.name, "page", i)
            return times, side.layout(b)
        finally:
            b.close()
            shutil.rmtree(directory, ignore_errors=True)

    def _timed(self, call, keys, expect):
        spent = 0.0
        for first, n, idx in self.plan:
            k = keys[first:first + n]
            if expect == "count":
                t = time.perf_counter()
                got = call(k)
                spent += time.perf_counter() - t
                assert got == n, (call.__name__, got, n)
            else:
                t = time.perf_counter()
                got = call(k, idx)
                spent += time.perf_counter() - t
                assert len(got) == n and all(got), (call.__name__, got)
        return spent


# -- rounds, table ---------------------------------------------------------------------------

def measure(shape, sides, rounds, directory, warm_reads):
    gbps = {s.name: {"write": [], "read": []} for s in sides}
    exists_us = {s.name: [] for s in sides}
    layouts = {}
    total = shape.page * shape.pages
    for r in range(-1, rounds):  # round -1 warms every side up, uncounted
        for side in (sides if r % 2 == 0 else sides[::-1]):
            slug = re.sub(r"[^A-Za-z0-9]+", "-", side.name).strip("-")
            d = os.path.join(directory, f"{shape.name}-{slug}-{r}")
            times, layouts[side.name] = shape.run(side, d, r, warm_reads)
            if r < 0:
                continue
            for op in ("write", "read"):
                gbps[side.name][op].append(total / times[op] / 1e9)
            exists_us[side.name].append(times["exists"] / shape.pages * 1e6)
    kv = sides[0].name
    rows = []
    for peer in sides[1:]:
        row = {"shape": shape.name, "page_bytes": shape.page, "pages": shape.pages,
               "batch": shape.batch, "rounds": rounds, "peer": peer.name,
               "kvtier_layout": layouts[kv],
               "exists_us_per_page": {"kvtier": statistics.median(exists_us[kv]),
                                      "fast_file": statistics.median(exists_us[peer.name])}}
        for op, target in shape.targets().items():
            a, b = gbps[kv][op], gbps[peer.name][op]
            ratios = [x / y for x, y in zip(a, b)]
            ratio = statistics.median(ratios)
            row[op] = {"kvtier_gbps": statistics.median(a), "fast_file_gbps": statistics.median(b),
                       "kvtier_rounds": a, "fast_file_rounds": b, "ratios": ratios,
                       "ratio": ratio, "target": target, "met": ratio >= target}
        rows.append(row)
    return rows


def fmt_size(n):
    return f"{n / (1 << 20):.2f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


def print_table(rows):
    head = (f"{'shape':<17} {'page':>10} {'pages':>5}  {'peer':<26} {'kvtier W':>8} "
            f"{'kvtier R':>8} {'ff W':>7} {'ff R':>7}  {'W ratio (min-max) target':<27} "
            f"{'R ratio (min-max) target':<27} {'met W/R':<7}  {'exists us/pg kv|ff':<18} "
            f"kvtier layout")
    print(head)
    print("-" * len(head))
    for row in rows:
        w, r = row["write"], row["read"]

        def cell(d):
            return (f"{d['ratio']:5.2f}x ({min(d['ratios']):.2f}-{max(d['ratios']):.2f}) "
                    f">={d['target']:.1f}x")

        e = row["exists_us_per_page"]
        met = ("yes" if w["met"] else "no") + "/" + ("yes" if r["met"] else "no")
        print(f"{row['shape']:<17} {fmt_size(row['page_bytes']):>10} {row['pages']:>5}  "
              f"{row['peer']:<26} {w['kvtier_gbps']:8.2f} {r['kvtier_gbps']:8.2f} "
              f"{w['fast_file_gbps']:7.2f} {r['fast_file_gbps']:7.2f}  {cell(w):<27} "
              f"{cell(r):<27} {met:<7}  "
              f"{e['kvtier']:7.1f}|{e['fast_file']:<9.1f}  {row['kvtier_layout'].split()[0]}",
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", required=True,
                    help="sglang's python/ tree at sgl-project/sglang#39880 (holds "
                         "sglang/srt/mem_cache/storage/fast_file/)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--mib", type=int, default=512, help="MiB of pages per shape")
    ap.add_argument("--rounds", type=int, default=3, help="counted rounds (at least 3)")
    ap.add_argument("--batch", type=int, default=128, help="pages a call (SGLang's 128)")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    ap.add_argument("--peer-defaults", action="store_true",
                    help="also fast_file with its default workers (1 read + 1 write)")
    ap.add_argument("--no-warm-memory", action="store_true",
                    help="do not touch and free the data's size of memory before each write")
    ap.add_argument("--no-warm-reads", action="store_true",
                    help="no untimed read into every pool slot before the timed reads")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds must be at least 3")

    peer = load_peer(args.peer)
    load_house()
    for name in args.shapes.split(","):
        if name not in svb.SHAPES:
            ap.error(f"unknown shape {name}; known: {', '.join(svb.SHAPES)}")
    svb.WARM_BYTES = 0 if args.no_warm_memory else (args.mib << 20) + (256 << 20)
    cpus = len(os.sched_getaffinity(0))
    sides = [Kvtier(), FastFile(peer, cpus)] + ([FastFile(peer)] if args.peer_defaults else [])

    print(f"peer: {peer.file}\n  checkout commit {peer.commit}; fast_file_store.py sha256 "
          f"{peer.sha256}")
    for name, why in STAND_INS:
        print(f"  stand-in for {name} ({why})")
    print(f"{cpus} CPUs usable; fast_file workers {cpus} read + {cpus} write"
          + (", and its defaults 1 + 1" if args.peer_defaults else ""), flush=True)

    directory = args.dir or tempfile.mkdtemp(prefix="kvtier-fast-file-compare-")
    os.makedirs(directory, exist_ok=True)
    rows, load = [], [os.getloadavg()[0]]
    try:
        for name in args.shapes.split(","):
            shape = Shape(name, args.mib, args.batch)
            rows += measure(shape, sides, args.rounds, directory, not args.no_warm_reads)
            load.append(os.getloadavg()[0])
            print(f"  {name} done ({len(rows)} rows)", file=sys.stderr, flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    print()
    print_table(rows)
    print(f"GB/s: medians of {args.rounds} rounds (alternating order, a store per side per "
          f"round, {args.batch}-page calls); ratios kvtier/fast_file: medians of per-round "
          f"ratios; every read checked byte for byte; load average (1 min) "
          f"{min(load):.2f}-{max(load):.2f}")
    if args.json:
        print(json.dumps({"peer": {"dir": peer.dir, "file": peer.file, "commit": peer.commit,
                                   "sha256": peer.sha256},
                          "stand_ins": [{"module": m, "why": w} for m, w in STAND_INS],
                          "cpus": cpus, "mib": args.mib, "rows": rows}))


if __name__ == "__main__":
    main()
