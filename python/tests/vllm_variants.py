"""vLLM's tier types as public forks of vLLM define them, for the tests that the tier adapts to
what it finds (kvtier._vllm_api.Shape). Each mirrors the named file at the named commit (fields
and their order; docstrings left out). vllm_fakes/ mirrors vllm-project/vllm@cda0f324."""

from dataclasses import dataclass, field
from typing import Any, Collection, Optional


@dataclass
class JobResultWithoutBytes:
    """vllm/v1/kv_offload/tiering/base.py at karya0/vllm@d7bc6b5b74d86798df67ba6ee68ee043bf5b72a4
    (also tangzzycc/vllm@76787da49dba2016e9feebca4980c18cb7694a71 and
    liranschour/vllm@46f42ae30ed7e33b2d1eeec12fcd79306ffb50f2)."""
    job_id: int
    success: bool
    successful_keys: Optional[Collection[bytes]] = None
    transfer_time: Optional[float] = None


@dataclass
class JobResultKeysOnly:
    """vllm/v1/kv_offload/tiering/base.py at
    vllm-project/vllm@ebbe482921658bd1fa23af6dfda6c75320235548."""
    job_id: int
    success: bool
    successful_keys: Optional[Collection[bytes]] = None


@dataclass
class JobResultTransferSize:
    """vllm/v1/kv_offload/tiering/base.py at
    Mob-max30/VLLM_Test@fbf37febd0c90c49625b68914e87ee19616f935e."""
    job_id: int
    success: bool
    successful_keys: Optional[Collection[bytes]] = None
    transfer_size: Optional[int] = field(default=None, compare=False)
    transfer_time: Optional[float] = field(default=None, compare=False)


@dataclass
class OffloadingEventWithoutOwnership:
    """vllm/v1/kv_offload/base.py at
    nacyot/vllm-ds4f-gb10@367d1ed18db5acaa99c441ce3fa9a2623eab3828."""
    keys: list
    medium: Any
    removed: bool
    locality: Any = None


JOB_RESULTS = [JobResultWithoutBytes, JobResultKeysOnly, JobResultTransferSize]
