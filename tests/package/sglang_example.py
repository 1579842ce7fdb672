"""Loads kvtier as SGLang loads a dynamic HiCache storage backend, from the extra config in
README.md (Use with SGLang), and moves pages through it with a stand-in host pool.

    python sglang_example.py README.md STORE_DIR

The kvtier it imports is whatever the interpreter finds (an installed wheel, a .deb).
"""

import importlib
import json
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python", "tests"))  # the fakes only
from fakes import HostPool, StorageConfig, host_indices  # noqa: E402

readme, store_dir = sys.argv[1], sys.argv[2]
text = open(readme, encoding="utf-8").read()
m = re.search(r"--hicache-storage-backend-extra-config '([^']*)'", text)
if not m:
    sys.exit(f"no --hicache-storage-backend-extra-config example in {readme}")
extra = json.loads(m.group(1))
extra["uri"] = f"file://{store_dir}"  # instead of /var/cache/kvtier

# What SGLang's dynamic backend does with it.
module = importlib.import_module(extra["module_path"])
backend_class = getattr(module, extra["class_name"])
config = StorageConfig(extra_config=extra)
writer = backend_class(config, extra)
pool = HostPool()
pool.fill_random(seed=11)
writer.register_mem_pool_host(pool)
keys = [f"{i:064x}" for i in range(1, 5)]
assert writer.batch_set_v1(keys, host_indices([0, 1, 2, 3], pool.page_size)) == [True] * 4
expected = [pool.page_bytes(p * pool.page_size).copy() for p in range(4)]

reader = backend_class(StorageConfig(extra_config=extra), extra)
other = HostPool()
reader.register_mem_pool_host(other)
assert reader.batch_exists(keys) == 4
assert reader.batch_get_v1(keys, host_indices([4, 5, 6, 7], other.page_size)) == [True] * 4
for slot, want in zip([4, 5, 6, 7], expected):
    assert (other.page_bytes(slot * other.page_size) == want).all(), f"slot {slot} differs"
writer.close()
reader.close()
print(f"{module.__name__}.{backend_class.__name__} from {module.__file__}: 4 pages round trip")
