import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from hangfs import HangFs  # noqa: E402


def open_fds():
    """Open descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


def du(root):
    """What `root` and everything under it take, as du counts it (st_blocks), links not
    followed."""
    total = os.lstat(root).st_blocks * 512
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            total += os.lstat(os.path.join(parent, name)).st_blocks * 512
    return total


def s3_test_server(monkeypatch):
    """The S3 server scripts/with-s3-server started, as (endpoint, region, bucket), with its
    credentials set in this test's environment only (read from KVTIER_TEST_S3_ENV_FILE; the
    run does not export them). Skips the test, saying why, when there is none."""
    endpoint = os.environ.get("KVTIER_TEST_S3_ENDPOINT")
    bucket = os.environ.get("KVTIER_TEST_S3_BUCKET")
    if not endpoint or not bucket:
        pytest.skip("no S3 server: " + os.environ.get("KVTIER_TEST_S3_UNAVAILABLE",
                                                     "KVTIER_TEST_S3_ENDPOINT is not set"))
    env_file = os.environ.get("KVTIER_TEST_S3_ENV_FILE")
    if env_file:
        with open(env_file) as f:
            for line in f:
                name, _, value = line.rstrip("\n").partition("=")
                if name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                    monkeypatch.setenv(name, value)
    if not os.environ.get("AWS_ACCESS_KEY_ID") or not os.environ.get("AWS_SECRET_ACCESS_KEY"):
        pytest.skip("no S3 credentials: neither KVTIER_TEST_S3_ENV_FILE nor AWS_ACCESS_KEY_ID "
                    "and AWS_SECRET_ACCESS_KEY give them")
    return endpoint, os.environ.get("KVTIER_TEST_S3_REGION", "us-east-1"), bucket


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def sglang(monkeypatch):
    """The adapter module reloaded with the fake `sglang` package installed."""
    # Imported here: the suites that do not use it need neither kvtier.sglang nor torch.
    import importlib

    import kvtier.sglang as adapter_module
    from sglang_fakes import install_sglang

    install_sglang(monkeypatch)
    module = importlib.reload(adapter_module)
    yield module
    monkeypatch.undo()
    importlib.reload(adapter_module)


def writer_and_reader(write, read, writes, last_rounds):
    """Runs write(n) for n in range(writes) on one thread and read(n), n = 0, 1, ..., on another,
    both from the moment both have started; the reader goes on until the writer is done, then
    `last_rounds` more times. Counts, not seconds: a slow machine takes longer, it cannot make
    the threads do less. Each call returns None or what went wrong; returns all that did,
    exceptions included. The barrier's timeout is a ceiling for a hung thread only."""
    errors = []
    started = threading.Barrier(2, timeout=300)
    writer_done = threading.Event()

    def writer():
        try:
            started.wait()
            for n in range(writes):
                err = write(n)
                if err is not None:
                    errors.append(err)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            writer_done.set()

    def reader():
        try:
            started.wait()
            n = after = 0
            while after < last_rounds:
                if writer_done.is_set():
                    after += 1
                err = read(n)
                if err is not None:
                    errors.append(err)
                n += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.fixture
def hangfs(tmp_path):
    """A FUSE mount that hangs on command; skips, saying why, where FUSE is missing."""
    helper = os.environ.get("KVTIER_HANGFS")
    if not helper or not os.path.exists(helper):
        pytest.skip("kvtier_hangfs is not built (no libfuse3 at configure time)")
    if os.geteuid() != 0:
        pytest.skip("mounting FUSE needs root")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        pytest.skip("/dev/fuse is not usable here")
    fs = HangFs(helper, str(tmp_path))
    if not fs.mounted:
        fs.close()
        pytest.skip("kvtier_hangfs could not mount: FUSE is not available here")
    yield fs
    fs.close()
