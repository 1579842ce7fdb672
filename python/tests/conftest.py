import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def open_fds():
    """Open descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")
