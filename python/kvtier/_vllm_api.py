"""vLLM's side of the secondary-tier API that kvtier.vllm_tier follows (docs/vllm.md): the
tier base class and the types KvtierTier answers with, vLLM's own where vLLM is importable and
stand-ins of the same shape where not, and what a vLLM with another tier API lacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

try:  # vLLM's own types when vLLM is importable; stand-ins otherwise.
    from vllm.v1.kv_offload import base as _vbase
    from vllm.v1.kv_offload.tiering import base as _tbase
    _Base = _tbase.SecondaryTierManager
except Exception:  # noqa: BLE001 - any import failure means "no vLLM here"
    _vbase = _tbase = None
    _Base = object

if _vbase is not None:
    LookupResult = _vbase.LookupResult
    JobResult = _tbase.JobResult
    RequestOffloadingContext = _vbase.RequestOffloadingContext
    OffloadingEvent = _vbase.OffloadingEvent
    Medium = _vbase.Medium
else:
    import enum

    class LookupResult(enum.Enum):  # type: ignore[no-redef]
        MISS = enum.auto()
        HIT = enum.auto()
        HIT_PENDING = enum.auto()
        RETRY = enum.auto()

    class Medium(enum.Enum):  # type: ignore[no-redef]
        CPU = "CPU"
        STORAGE = "STORAGE"

    @dataclass
    class JobResult:  # type: ignore[no-redef]
        job_id: int
        success: bool
        successful_keys: Optional[list] = None
        transfer_time: Optional[float] = None
        transfer_bytes: Optional[int] = None

    @dataclass
    class RequestOffloadingContext:  # type: ignore[no-redef]
        policy: Any = None

    @dataclass
    class OffloadingEvent:  # type: ignore[no-redef]
        keys: list
        medium: Any
        removed: bool
        locality: Any = None
        ownership: Optional[str] = None
        removal_expected: bool = False


# The tier API KvtierTier follows (docs/vllm.md); a vLLM whose tier base class lacks it gets a
# clear error when the engine starts, not a failure mid-serving.
_API_PROBLEM: Optional[str] = None
if _Base is not object:
    _missing = [m for m in ("get_finished_jobs", "on_new_request", "drain_jobs")
                if not hasattr(_Base, m)]
    if _missing:
        _API_PROBLEM = (
            "KvtierTier follows vLLM's secondary-tier API of 2026-12 (TransferJob, "
            "get_finished_jobs, on_new_request, drain_jobs; docs/vllm.md); this vLLM's "
            f"SecondaryTierManager lacks {', '.join(_missing)}: use a vLLM with that API")
