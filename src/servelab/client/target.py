"""The HTTP target a schedule is sent to, and the reachability check made before a run."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from servelab.client.backends import Backend, SamplingParams
from servelab.errors import ServelabError
from servelab.workload.request import RequestSpec


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """Where and how requests are sent.

    `base_url` is scheme://host:port (no trailing slash); `endpoint` the path requests are
    POSTed to. `api_key` becomes an `Authorization: Bearer` header and nothing else: it is
    excluded from `repr`, and results record none of this object (nor `extra_headers`,
    which may carry credentials too).

    vLLM bench serve's request extras: `extra_headers` (`--header`, sent with every
    request after the defaults, so they override them), `extra_body` (`--extra-body`,
    merged into every body last), `logprobs` (`--logprobs`), `request_id_prefix`
    (`--request-id-prefix`: request i carries `x-request-id: PREFIX<i>`), `lora_models`
    (request i asks for model `lora_models[i % n]` instead of `model`; the caller
    expands `--lora-assignment random` into a seeded sequence), `verify_tls` (off with
    `--insecure`).
    """

    base_url: str
    endpoint: str
    backend: Backend
    model: str
    ignore_eos: bool = False
    sampling: SamplingParams = SamplingParams()
    request_timeout_s: float = 600.0
    api_key: str | None = field(default=None, repr=False)
    extra_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    extra_body: Mapping[str, object] = field(default_factory=dict)
    logprobs: int | None = None
    request_id_prefix: str = ""
    lora_models: tuple[str, ...] = ()
    verify_tls: bool = True
    keep_text: bool = False

    @property
    def url(self) -> str:
        return self.base_url + self.endpoint

    def headers(self) -> dict[str, str]:
        """Request headers; the only place the API key is used."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.extra_headers)
        return headers

    def request_headers(self, index: int, base: dict[str, str], tag: str = "") -> dict[str, str]:
        """`base` (from `headers()`) plus request `index`'s own id when a prefix is set
        (`tag` keeps warm-ups' ids apart from the requests they copy)."""
        if not self.request_id_prefix:
            return base
        return {**base, "x-request-id": f"{self.request_id_prefix}{tag}{index}"}

    def model_for(self, index: int) -> str:
        """The model name request `index` asks for (a LoRA adapter's when given)."""
        if self.lora_models:
            return self.lora_models[index % len(self.lora_models)]
        return self.model

    def body(self, spec: RequestSpec) -> bytes:
        """The JSON body of `spec`'s request as this target is spoken to."""
        return self.backend.body(spec, self.model_for(spec.index), self.ignore_eos, self.sampling,
                                 logprobs=self.logprobs, extra_body=self.extra_body)


def tls_connector(verify_tls: bool) -> aiohttp.TCPConnector:
    """aiohttp's connector, verifying certificates unless `--insecure` said not to."""
    return aiohttp.TCPConnector(ssl=None if verify_tls else False)


async def check_reachable(target_base_url: str, headers: dict[str, str], timeout_s: float = 10.0,
                          verify_tls: bool = True) -> list[str]:
    """GET `/v1/models` and return the model ids it lists ([] when it lists none or is not
    an OpenAI model list; any HTTP answer counts as reachable). Raise ServelabError when the
    connection cannot be made, naming the URL and the reason."""
    url = target_base_url + "/v1/models"
    try:
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers,
            connector=tls_connector(verify_tls),
        ) as session:
            async with session.get(url) as resp:
                body = await resp.read()
    except aiohttp.ClientConnectorError as exc:
        err = exc.os_error
        reason = os.strerror(err.errno) if err is not None and err.errno else str(exc)
        raise ServelabError(f"cannot reach {target_base_url}: {reason.lower()}") from None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise ServelabError(
            f"cannot reach {target_base_url}: {type(exc).__name__} {exc}".rstrip()
        ) from None
    try:
        data = json.loads(body).get("data") or []
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError, TypeError):
        return []
