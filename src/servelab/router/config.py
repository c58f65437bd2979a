"""The router's settings: one pydantic model, filled from flags and/or a YAML file.

Unknown keys are rejected with the key named; every duration has its unit in the name.
The API key is excluded from `repr`; prefer `api_key_env` (the name of an environment
variable) to writing a key into a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servelab.errors import ServelabError
from servelab.routing.policies import POLICY_NAMES, policy_params


class RouterConfig(BaseModel):
    """Everything `servelab route` needs (see docs/router.md for each field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backends: list[str] = Field(min_length=1)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    policy: str = "round_robin"
    policy_params: dict[str, int | float | str | bool] = Field(default_factory=dict)
    explain: bool = False
    api_key: str | None = Field(default=None, repr=False)
    api_key_env: str | None = None
    seed: int = 0
    max_body_bytes: int = Field(default=8 << 20, ge=1)
    max_in_flight: int = Field(default=4096, ge=1)
    request_timeout_s: float = Field(default=600.0, gt=0)
    connect_timeout_s: float = Field(default=2.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    retry_backoff_ms: float = Field(default=20.0, ge=0)
    retry_budget_ratio: float = Field(default=0.2, ge=0)
    retry_budget_min: int = Field(default=10, ge=0)
    retry_budget_window_s: float = Field(default=10.0, gt=0)
    health_interval_s: float = Field(default=0.5, gt=0)
    health_timeout_s: float = Field(default=1.0, gt=0)
    eject_after_errors: int = Field(default=3, ge=1)
    readmit_after_checks: int = Field(default=1, ge=1)
    telemetry_interval_s: float = Field(default=0.5, gt=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)
    hotspot_window_s: float = Field(default=60.0, gt=0)

    @field_validator("backends")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        out = []
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
                raise ValueError(f"backend {url!r} is not http(s)://HOST:PORT")
            if parts.path.strip("/") or parts.query or parts.fragment:
                raise ValueError(f"backend {url!r} must have no path (the router adds /v1/...)")
            out.append(f"{parts.scheme}://{parts.netloc}")
        if len(set(out)) != len(out):
            raise ValueError("the same backend is listed twice")
        return out

    @field_validator("policy")
    @classmethod
    def _policy(cls, name: str) -> str:
        if name not in POLICY_NAMES:
            raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
        return name

    def resolved_api_key(self) -> str | None:
        """The key clients must present: `api_key`, else the `api_key_env` variable."""
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise ServelabError(f"api_key_env: environment variable {self.api_key_env} is unset")
            return value
        return None

    def typed_policy_params(self) -> dict[str, Any]:
        """`policy_params` converted to each parameter's type (flags arrive as text)."""
        defaults = policy_params(self.policy)
        out: dict[str, Any] = {}
        for key, value in self.policy_params.items():
            if key not in defaults:
                takes = ", ".join(defaults) or "no parameters"
                raise ServelabError(
                    f"policy {self.policy!r} has no parameter {key!r} (it takes: {takes})"
                )
            kind = type(defaults[key])
            try:
                out[key] = kind(value)
            except (TypeError, ValueError):
                raise ServelabError(
                    f"policy parameter {key}={value!r}: expected {kind.__name__}"
                ) from None
        return out


def build_config(file: Path | None, overrides: dict[str, Any]) -> RouterConfig:
    """The file's settings (if any) with `overrides` (flags that were given) on top."""
    data: dict[str, Any] = {}
    source = "flags"
    if file is not None:
        source = str(file)
        try:
            loaded = yaml.safe_load(file.read_text())
        except OSError as exc:
            raise ServelabError(f"{file}: cannot read ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise ServelabError(f"{file}: not valid YAML ({exc})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ServelabError(f"{file}: expected a mapping of settings at the top level")
        data.update(loaded or {})
    data.update(overrides)
    try:
        config = RouterConfig(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        what = what.removeprefix("Value error, ")
        raise ServelabError(f"{source}: {where}: {what}") from None
    config.typed_policy_params()  # fail now, not on the first request
    return config
