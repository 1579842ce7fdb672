"""Test stand-in for vllm/v1/kv_offload/tiering/base.py at vllm-project/vllm@cda0f3248538da3cc96b3760fe4cfaa7d3d652b9:
the job types and the SecondaryTierManager interface (six abstract methods, the rest with
their defaults)."""

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Collection, Optional

import numpy as np

from vllm.v1.kv_offload.base import (LookupResult, Medium, ReqContext,  # noqa: F401
                                     RequestOffloadingContext)

JobId = int


@dataclass
class TransferJob:
    job_id: JobId
    keys: Collection[bytes]
    chunk_ids: np.ndarray
    is_promotion: bool
    req_context: ReqContext
    submit_time: float = field(default_factory=time.monotonic)


@dataclass
class JobResult:
    job_id: JobId
    success: bool
    successful_keys: Optional[Collection[bytes]] = None
    transfer_time: Optional[float] = None
    transfer_bytes: Optional[int] = None


class SecondaryTierManager(ABC):
    medium: ClassVar[Optional[Medium]] = None

    def __init__(self, offloading_spec, primary_kv_view: memoryview, tier_type: str,
                 backpressure_detector: Any = None) -> None:
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        assert primary_kv_view.strides is not None
        self._block_size_bytes = primary_kv_view.strides[0]
        self.tier_type = tier_type
        self.locality = None
        self._bp_detector = backpressure_detector

    @property
    def block_size_bytes(self) -> int:
        return self._block_size_bytes

    @abstractmethod
    def lookup(self, key, req_context) -> LookupResult: ...

    @abstractmethod
    def submit_store(self, job_metadata: TransferJob) -> None: ...

    @abstractmethod
    def submit_load(self, job_metadata: TransferJob) -> None: ...

    @abstractmethod
    def get_finished_jobs(self): ...

    @abstractmethod
    def on_new_request(self, req_context) -> RequestOffloadingContext: ...

    @abstractmethod
    def drain_jobs(self) -> None: ...

    def has_pending_work(self) -> bool:
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context) -> None:
        return

    def on_request_finished(self, req_context) -> None:
        return

    def serve_external_requests(self, parent) -> None:
        return

    def on_schedule_end(self, context) -> None:
        return

    def shutdown(self) -> None:
        return

    @classmethod
    def build_metric_definitions(cls, extra_config) -> dict:
        return {}

    def get_stats(self):
        return None
