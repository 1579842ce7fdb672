"""Sealed pages on the shared storage of several hosts (docs/security.md): tenants of one key
file on one CephFS root or radosgw bucket. The cluster, the hosts and their stores are
test_multihost.py's (tests/ceph/run-tests.sh runs both files against one cluster).
"""

import hashlib

import pytest

from test_multihost import KINDS, MODEL, Location, cluster, hosts, keys  # noqa: F401


@pytest.mark.parametrize("kind", KINDS)
def test_two_tenants_on_one_root_each_see_only_their_own_pages(cluster, hosts, kind, tmp_path):
    # One key file, tenants alpha (hosts A and C) and beta (host B), the same page keys: each
    # tenant reads its own writer's bytes and a store without the key finds nothing
    # (docs/security.md; store_sealed_test scans what is stored for plaintext).
    key_file = tmp_path / "keys"
    key_file.write_text("1 " + hashlib.sha256(b"multihost tenants").hexdigest() + "\n")
    key_file.chmod(0o600)
    loc = Location(cluster, kind, "tenants", query="refresh_ms=0" if kind.startswith("s3") else "")
    ks = keys("t", 16)
    a, b, c = hosts["a"], hosts["b"], hosts["c"]
    for h, tenant in ((a, "alpha"), (b, "beta"), (c, "alpha")):
        h.call("open", name="s", uri=loc.uri(h.name), model=MODEL, key_file=str(key_file),
               tenant=tenant)
    assert a.call("put", name="s", keys=ks, writer="a")["codes"] == ["OK"] * 16
    assert b.call("put", name="s", keys=ks, writer="b")["codes"] == ["OK"] * 16
    assert c.call("get", name="s", keys=ks, writers=["a", "b"])["got"] == ["a"] * 16
    assert b.call("get", name="s", keys=ks, writers=["a", "b"])["got"] == ["b"] * 16
    c.call("open", name="plain", uri=loc.uri("c"), model=MODEL)
    assert c.call("exists", name="plain", keys=ks)["batch_exists"] == 0
    assert c.call("get", name="plain", keys=ks, writers=["a", "b"])["got"] == ["MISS"] * 16
