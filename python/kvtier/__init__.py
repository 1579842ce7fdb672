"""kvtier: a storage tier for LLM KV-cache pages.

    import numpy as np, kvtier
    store = kvtier.Store("/var/cache/kvtier", model="llama3-8b", dtype="bfloat16",
                         layout="page_first", page_tokens=64)
    pool = np.zeros(64 << 20, dtype=np.uint8)
    with store.register_memory(pool):              # once, for the whole pool
        store.put("key-0", pool[:8 << 20])           # zero-copy from registered memory
        hit = store.get("key-0", pool[8 << 20:16 << 20])   # kvtier.Status, truthy on a hit

`kvtier.Store` is the page store (set/get/batches/exists/clear/stats), `kvtier.Agent` the
transfer layer under it, `kvtier.sglang.HiCacheKvtier` the SGLang HiCache storage backend.
"""

from kvtier._kvtier import (
    Agent,
    BatchResult,
    Error,
    InvalidArgumentError,
    Registration,
    Status,
    StorageError,
    Store,
    Target,
    Ticket,
    Transfer,
    __version__,
    capacity_holding,
    capacity_page_bytes,
)

__all__ = [
    "Agent",
    "BatchResult",
    "Error",
    "InvalidArgumentError",
    "Registration",
    "Status",
    "StorageError",
    "Store",
    "Target",
    "Ticket",
    "Transfer",
    "__version__",
    "capacity_holding",
    "capacity_page_bytes",
]
