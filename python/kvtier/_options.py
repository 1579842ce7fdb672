"""The store options both engine adapters take (kvtier.sglang, kvtier.vllm_tier): sizes with
units, booleans, the environment fallback, their checks, and the store they open.

Each engine names the options its own way (SGLang's `capacity` and `file_layout`, vLLM's
`capacity_bytes` and `layout`); `read_settings` maps those names onto one `StoreSettings`, and
`StoreSettings.open` opens a store of one page geometry with them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

import kvtier

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}

BACKENDS = ("auto", "uring", "posix", "s3")
DIRECT_IO = ("off", "auto", "on")
FILE_LAYOUTS = ("", "files", "segments", "auto")
ISOLATE = ("", "auto", "on", "off")
ADMISSION = ("", "adaptive", "always")


def option(options: Mapping[str, Any], key: str, env: Optional[str], default: Any) -> Any:
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
                      isolate: str = "", admission: str = "") -> str:
    """`uri` (a directory, file://..., s3://... or mem://...) with the adapter's backend,
    deadline, isolation and admission added where the URI does not set them itself."""
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
    if admission and not uri.startswith("s3://") and "admission=" not in uri:
        params["admission"] = admission
    if params:
        if "://" not in uri:  # a plain directory
            uri = "file://" + uri.replace("%", "%25").replace("?", "%3F").replace(",", "%2C")
        uri += ("&" if "?" in uri else "?") + "&".join(f"{k}={v}" for k, v in params.items())
    return uri


@dataclass
class StoreSettings:
    """Where pages live and how the store treats them: what both engines configure."""

    uri: str
    backend: str = "auto"
    direct_io: str = "off"
    file_layout: str = ""
    fsync: bool = False
    salt: str = ""
    capacity_bytes: int = 0
    min_free_bytes: int = 0
    deadline_ms: Optional[int] = None
    isolate: str = ""
    admission: str = ""
    # Sealed pages (docs/security.md): the key file (default: $KVTIER_KEY_FILE when set) and
    # whose keys seal them. The tenant is passed on only where a key is configured.
    key_file: str = ""
    tenant: str = ""

    def sealed(self) -> bool:
        return bool(self.key_file or os.environ.get("KVTIER_KEY_FILE"))

    def location(self) -> str:
        """The URI the store opens: the location with backend, deadline, isolation and
        admission."""
        return with_store_params(self.uri, backend=self.backend, deadline_ms=self.deadline_ms,
                                 isolate=self.isolate, admission=self.admission)

    def open(self, *, model: str, dtype: str, layout: str, page_tokens: int, piece_bytes: int,
             pieces: int, tp: tuple = (0, 1), pp: tuple = (0, 1), cp: tuple = (0, 1),
             mla: bool = False, page_bytes: int = 0,
             geometry: Optional[Dict[str, Any]] = None, shares: int = 1) -> "kvtier.Store":
        """A store of one page geometry. `geometry`: what else makes pages interchangeable
        in the engine's own terms; it joins the salt, so any difference is a namespace of its
        own (a miss, never another geometry's bytes). `shares`: how many namespaces of the
        deployment split capacity_bytes evenly (each a ledger of its own: shards of a model
        split across ranks), this store's being one."""
        salt = self.salt
        if geometry is not None:
            salt = "\n".join([json.dumps(geometry, sort_keys=True)] + ([salt] if salt else []))
        return kvtier.Store(
            self.location(), model=model, dtype=dtype, layout=layout, page_tokens=page_tokens,
            piece_bytes=piece_bytes, pieces_per_page=pieces, tp=tp, pp=pp, cp=cp, mla=mla,
            salt=salt, fsync=self.fsync, direct_io=self.direct_io,
            capacity_bytes=self.capacity_bytes // max(shares, 1),
            min_free_bytes=self.min_free_bytes,
            file_layout=self.file_layout, page_bytes=page_bytes, key_file=self.key_file,
            tenant=self.tenant if self.sealed() else "")


def _choice(value: Any, name: str, choices: tuple) -> str:
    text = str(value or "")
    if text not in choices:
        shown = [c for c in choices if c]
        raise kvtier.InvalidArgumentError(f"{name} '{value}': expected one of {', '.join(shown)}")
    return text


def read_settings(options: Mapping[str, Any], names: Mapping[str, str],
                  env: Optional[Mapping[str, str]] = None,
                  defaults: Optional[Mapping[str, Any]] = None) -> StoreSettings:
    """StoreSettings from an engine's options. `names` maps a StoreSettings field to the
    engine's option name (fields it leaves out keep their default), `env` a field to the
    environment variable read where the option is absent, `defaults` a field to the engine's
    own default. A malformed value raises kvtier.InvalidArgumentError (a ValueError) naming
    the option."""
    env = env or {}
    defaults = defaults or {}

    def get(field: str, fallback: Any) -> tuple:
        key = names.get(field)
        if key is None:
            return field, defaults.get(field, fallback)
        return key, option(options, key, env.get(field), defaults.get(field, fallback))

    key, uri = get("uri", "")
    settings = StoreSettings(uri=str(uri))
    key, value = get("backend", "auto")
    settings.backend = _choice(value, key, BACKENDS)
    key, value = get("direct_io", "off")
    settings.direct_io = _choice(value, key, DIRECT_IO)
    key, value = get("file_layout", "")
    settings.file_layout = _choice(value, key, FILE_LAYOUTS)
    key, value = get("isolate", "")
    settings.isolate = _choice(value, key, ISOLATE)
    key, value = get("admission", "")
    settings.admission = _choice(value, key, ADMISSION)
    settings.fsync = as_bool(get("fsync", False)[1])
    settings.salt = str(get("salt", "")[1] or "")
    settings.key_file = str(get("key_file", "")[1] or "")
    settings.tenant = str(get("tenant", "")[1] or "")
    key, value = get("capacity_bytes", 0)
    settings.capacity_bytes = parse_bytes(value, key)
    key, value = get("min_free_bytes", 0)
    settings.min_free_bytes = parse_bytes(value, key)
    key, value = get("deadline_ms", None)
    if value not in (None, ""):
        try:
            settings.deadline_ms = int(value)
        except (TypeError, ValueError):
            raise kvtier.InvalidArgumentError(f"{key} '{value}' is not a number") from None
        if settings.deadline_ms < 0:
            raise kvtier.InvalidArgumentError(f"{key} {settings.deadline_ms} is negative")
    return settings
