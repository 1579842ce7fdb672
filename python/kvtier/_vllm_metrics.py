"""The metrics kvtier.vllm_tier.KvtierTier reports in vLLM's Prometheus: each counter's and
gauge's name and documentation, and vLLM's stats class that carries them (looked up once)."""

from __future__ import annotations

import importlib
from typing import Any, List

# The tier's metrics in vLLM's Prometheus (KvtierTier's build_metric_definitions, get_stats): a
# counter is what happened since the previous get_stats, a gauge the state at this one.
_METRIC_PREFIX = "vllm:kv_offload_kvtier_"
_COUNTERS = {
    "lookups": "Chunks the CPU tier missed and asked this tier for.",
    "lookup_hits": "Chunks this tier answered HIT (in its index).",
    "lookup_retries": "Chunks answered RETRY while storage was asked in the background.",
    "load_chunks": "Chunks loaded into the CPU tier.",
    "load_bytes": "Bytes loaded into the CPU tier.",
    "load_time": "Seconds load jobs took, submission to completion, summed.",
    "load_missing": "Chunks a load did not find: absent, damaged or of another geometry "
                    "(a miss, never bytes).",
    "load_faults": "Chunks a load failed on: storage errors, deadlines.",
    "store_chunks": "Chunks written to storage.",
    "store_bytes": "Bytes written to storage.",
    "store_time": "Seconds store jobs took, submission to completion, summed.",
    "store_skipped": "Chunks a store skipped: the tier already held them.",
    "store_failed": "Chunks a store could not write: storage errors, deadlines, no room.",
    "evicted_chunks": "Chunks this process evicted to stay within capacity_bytes.",
    "evicted_bytes": "Bytes this process evicted to stay within capacity_bytes.",
    "deadline_misses": "Storage operations that missed deadline_ms.",
}
_GAUGES = {
    "cache_bytes": "Bytes the tier's location holds (with capacity_bytes: the shared ledger "
                   "of every process using it, and what is kept beside the chunks).",
    "metadata_bytes": "Of capacity_bytes, what the tier sets aside for what it keeps beside "
                      "the chunks (directories, the ledger, shared files).",
    "cache_chunks": "Chunks this process knows the location holds.",
    "capacity_bytes": "The tier's capacity_bytes (0: none).",
    "jobs_in_flight": "Load and store jobs submitted and not yet reported.",
    "locations_unhealthy": "Storage locations skipped because they stopped answering.",
}
_STATS_CLASS: List[Any] = []


def _stats_class() -> Any:
    """vLLM's OffloadingConnectorStats with counters and gauges, or None (an older vLLM, or
    none). Looked up once."""
    if not _STATS_CLASS:
        found = None
        for module in ("vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics",
                       "vllm.backends.distributed.kv_transfer.kv_connector.v1.offloading."
                       "metrics"):
            try:
                cls = getattr(importlib.import_module(module), "OffloadingConnectorStats", None)
            except Exception:  # noqa: BLE001 - absent or unimportable: try the next
                continue
            if cls is not None and hasattr(cls, "increase_counter") and \
                    hasattr(cls, "set_gauge"):
                found = cls
                break
        _STATS_CLASS.append(found)
    return _STATS_CLASS[0]
