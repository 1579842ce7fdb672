"""Test stand-in for vllm/v1/kv_offload/config.py at vllm-project/vllm@006f89ace7ca5b01ba9e0fe9633029d8c4206dea,
plus the fields newer code reads (canonical_layout, kv_cache_layout: tiering/spec.py at
0078e9d2b020be709d7d756877106fd1015ea4f4; data_parallel_rank_local: tiering/kvcr/manager.py at
0fea6e5d1f4678fa5bb6f2df1f72b83f5a5a3658)."""

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class OffloadingGroupConfig:
    tokens_per_block: int
    layer_names: tuple


@dataclass(frozen=True)
class OffloadingModelConfig:
    name: str
    dtype: str


@dataclass(frozen=True)
class OffloadingCacheConfig:
    tokens_per_hash: int
    blocks_per_chunk: int


@dataclass(frozen=True)
class OffloadingParallelConfig:
    rank: int
    world_size: int
    tp_size: int
    pp_size: int
    pcp_size: int
    dcp_size: int
    data_parallel_index: int
    is_parallelism_agnostic: bool
    data_parallel_rank_local: int = 0


@dataclass(frozen=True)
class OffloadingConfig:
    groups: tuple
    worker_kv_bytes_per_block: int
    enable_kv_cache_events: bool
    extra_config: Mapping[str, Any]
    engine_id: str
    model: OffloadingModelConfig
    cache: OffloadingCacheConfig
    parallel: OffloadingParallelConfig
    replicated_layout: bool = False
    num_cpu_blocks: Optional[int] = None
    canonical_layout: bool = False
    kv_cache_layout: Optional[str] = None
