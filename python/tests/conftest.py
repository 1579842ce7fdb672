import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def open_fds():
    """Open descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


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
