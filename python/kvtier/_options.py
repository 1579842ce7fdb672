"""Option parsing the engine adapters share (kvtier.sglang, kvtier.vllm_tier): sizes with
units, booleans, the environment fallback, and the store parameters an adapter adds to a
location's URI."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import kvtier

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}


def option(options: Dict[str, Any], key: str, env: Optional[str], default: Any) -> Any:
    """options[key], else the environment variable `env`, else `default`."""
    value = options.get(key)
    if value is None and env is not None:
        value = os.environ.get(env)
    return default if value is None else value


def as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def parse_bytes(value: Any, name: str) -> int:
    """100, "100GiB", "1.5TB", "64 MiB" -> bytes; 0/None/"" -> 0 (no limit)."""
    if value in (None, ""):
        return 0
    if isinstance(value, bool):
        raise kvtier.InvalidArgumentError(f"{name}: {value!r} is not a size")
    if isinstance(value, (int, float)):
        if value < 0:
            raise kvtier.InvalidArgumentError(f"{name}: {value} is negative")
        return int(value)
    text = str(value).strip().lower().replace(" ", "")
    digits = len(text) - len(text.lstrip("0123456789."))
    number, unit = text[:digits], text[digits:]
    if not number or unit not in _UNITS:
        raise kvtier.InvalidArgumentError(
            f"{name}: '{value}' is not a size (examples: 107374182400, 100GiB, 1.5TB)")
    try:
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise kvtier.InvalidArgumentError(f"{name}: '{value}' is not a size") from None


def with_store_params(uri: str, *, backend: str = "auto", deadline_ms: Optional[int] = None,
                      isolate: str = "") -> str:
    """`uri` (a directory, file://..., s3://... or mem://...) with the adapter's backend,
    deadline and isolation added where the URI does not set them itself."""
    if backend != "auto" and "backend=" not in uri and "://" in uri and \
            not uri.startswith("s3://"):
        uri += ("&" if "?" in uri else "?") + f"backend={backend}"
    if uri.startswith("mem://"):
        return uri
    params = {}
    if deadline_ms is not None and "deadline_ms=" not in uri:
        params["deadline_ms"] = str(deadline_ms)
    if isolate and not uri.startswith("s3://") and "isolate=" not in uri:
        params["isolate"] = isolate
    if params:
        if "://" not in uri:  # a plain directory
            uri = "file://" + uri.replace("%", "%25").replace("?", "%3F").replace(",", "%2C")
        uri += ("&" if "?" in uri else "?") + "&".join(f"{k}={v}" for k, v in params.items())
    return uri
