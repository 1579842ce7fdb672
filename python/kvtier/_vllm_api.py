"""vLLM's side of the secondary-tier API that kvtier.vllm_tier follows (docs/vllm.md): the
tier base class and the types KvtierTier answers with, vLLM's own where vLLM is importable and
stand-ins of the same shape where not, and what a vLLM with another tier API lacks."""

from __future__ import annotations

import inspect
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


class Shape:
    """How to build one of vLLM's result types as the vLLM in this process defines it, found
    from its constructor when the tier loads. Forks of vLLM's kv_offload/tiering/base.py
    define JobResult without fields that vllm-project/vllm@cda0f324 has: without
    transfer_bytes (karya0/vllm@d7bc6b5b, tangzzycc/vllm@76787da4, liranschour/vllm@46f42ae3:
    job_id, success, successful_keys, transfer_time), with successful_keys alone
    (vllm-project/vllm@ebbe4829), or with the bytes as transfer_size
    (Mob-max30/VLLM_Test@fbf37feb); OffloadingEvent without ownership and removal_expected
    (nacyot/vllm-ds4f-gb10@367d1ed1, kv_offload/base.py). A field the class lacks is left out
    (or given under the name it has, `renames`), never passed to fail the tier's first job."""

    def __init__(self, cls: Any, renames: Optional[dict] = None) -> None:
        self.cls = cls
        self.renames = dict(renames or {})
        try:
            params = inspect.signature(cls).parameters
        except (TypeError, ValueError):  # no signature to read: pass every field
            params = None
        if params is not None and any(p.kind is p.VAR_KEYWORD for p in params.values()):
            params = None
        self.accepts = None if params is None else frozenset(params)

    def __call__(self, *args: Any, **fields: Any) -> Any:
        if self.accepts is None:
            return self.cls(*args, **fields)
        kept = {}
        for name, value in fields.items():
            if name in self.accepts:
                kept[name] = value
            elif self.renames.get(name) in self.accepts:
                kept[self.renames[name]] = value
        return self.cls(*args, **kept)


# What KvtierTier builds its results and events with (job_result(job_id, success, **fields),
# offloading_event(**fields)).
job_result = Shape(JobResult, {"transfer_bytes": "transfer_size"})
offloading_event = Shape(OffloadingEvent)


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
