"""Test stand-in for vllm/v1/kv_offload/base.py at vllm-project/vllm@0105e232b7fa4e1b59ec87531f167c0443a5095d:
the types a secondary tier sees (keys, request context, lookup results, events, metric
metadata, the offloading spec's attributes)."""

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Collection, NamedTuple, NewType, Optional

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


def get_offload_block_hash(key: OffloadKey) -> bytes:
    return key[:-4]


def get_offload_group_idx(key: OffloadKey) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


class Medium(enum.Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(enum.Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


class TierMatcher(NamedTuple):
    medium: Optional[Medium] = None
    locality: Optional[Locality] = None

    def matches(self, medium, locality) -> bool:
        return ((self.medium is None or medium is None or self.medium == medium) and
                (self.locality is None or locality is None or self.locality == locality))


@dataclass(frozen=True)
class TierFilter:
    matchers: tuple = ()
    ALL: ClassVar["TierFilter"]

    def allows(self, medium, locality) -> bool:
        return self is TierFilter.ALL or any(m.matches(medium, locality) for m in self.matchers)


TierFilter.ALL = TierFilter(matchers=(TierMatcher(),))


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: Optional[dict] = None
    kv_hints: Any = None
    load_tier_filter: TierFilter = TierFilter.ALL
    _state: dict = field(default_factory=dict, init=False, repr=False)

    def set_state(self, val) -> None:
        self._state[type(val)] = val

    def get_state(self, cls):
        return self._state.get(cls)


class LookupResult(enum.Enum):
    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


class OffloadPolicy(enum.Enum):
    CHUNK_LEVEL = "chunk_level"
    REQUEST_LEVEL = "request_level"


@dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.CHUNK_LEVEL


class ScheduleEndContext(NamedTuple):
    new_req_ids: Collection[str]
    preempted_req_ids: Collection[str]


@dataclass
class OffloadingEvent:
    keys: list
    medium: Medium
    removed: bool
    locality: Optional[Locality] = None
    ownership: Optional[str] = None
    removal_expected: bool = False


@dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: tuple = ()


@dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingGaugeMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingKVEventsConfig:
    enable_kv_cache_events: bool
    self_describing_kv_events: bool


class OffloadingSpec:
    """What OffloadingSpec.__init__(config) sets (the attributes a tier reads)."""

    def __init__(self, config) -> None:
        self.config = config
        self.extra_config = config.extra_config
        self.replicated_layout = False
        self.kv_events_config = OffloadingKVEventsConfig(
            config.enable_kv_cache_events,
            bool(self.extra_config.get("self_describing_kv_events", False)))
        self.tokens_per_block = tuple(g.tokens_per_block for g in config.groups)
        self.tokens_per_hash = config.cache.tokens_per_hash
        self.blocks_per_chunk = config.cache.blocks_per_chunk
