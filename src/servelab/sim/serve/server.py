"""`servelab sim serve`: the simulated engine behind an OpenAI-compatible HTTP server.

Routes as vLLM's: `POST /v1/completions`, `POST /v1/chat/completions` (JSON or SSE with
usage), `GET /v1/models`, `GET /health`, `POST /tokenize`, `GET /metrics`, `GET /version`.
Requests go to a `RealtimeDriver`, which steps the engine on the simulated schedule and
hands tokens back as they are emitted; `servelab.sim.serve.reply` writes them out (SSE or one JSON
body). Every response of a generation request carries the header `X-Servelab-Arrival-S`:
the request's arrival in simulated seconds since the server started, so an offline replay
can be fed exactly the arrivals the server saw.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass

from aiohttp import web

from servelab import __version__
from servelab.sim.engine import rejection_message
from servelab.sim.serve.metrics import CONTENT_TYPE, CacheConfig, RequestTimes, VllmMetrics
from servelab.sim.serve.driver import (
    Delivery,
    RealtimeDriver,
    RequestStream,
    ServedEngine,
    VirtualClock,
)
from servelab.sim.serve.log import StatsLine, VllmLog
from servelab.sim.serve.openai import (
    ApiError,
    GenerationParams,
    Kind,
    ResponseHead,
    model_not_found,
    parse_generation,
    parse_json,
)
from servelab.sim.serve.reply import collect_reply, stream_reply
from servelab.sim.serve.text import PromptTokenizer, TokenTexts, render_chat

__all__ = ["ARRIVAL_HEADER", "ServerConfig", "ServedEngine", "SimServer"]

ARRIVAL_HEADER = "X-Servelab-Arrival-S"
SIM_VERSION = f"{__version__}+servelab.sim"
# vLLM's CompletionRequest.max_tokens default; chat defaults to the room left in the context.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How the server presents itself. `port` 0 picks a free port (see `SimServer.port`);
    `time_scale` > 1 runs the simulated clock faster than wall time."""

    served_model_name: str
    model: str
    max_model_len: int
    host: str = "127.0.0.1"
    port: int = 0
    time_scale: float = 1.0
    seed: int = 0
    stats_interval_s: float = 10.0


class _MetricsObserver:
    """Feeds token deliveries into the latency histograms (simulated seconds)."""

    def __init__(self, metrics: VllmMetrics) -> None:
        self._m = metrics

    def on_tokens(self, stream: RequestStream, delivery: Delivery) -> None:
        at = delivery.at_s
        if stream.last_token_s is None:
            self._m.observe_first_token(at - stream.arrival_s)
        else:
            self._m.observe_inter_token(at - stream.last_token_s)
        if delivery.event.finished:
            assert stream.scheduled_s is not None and stream.first_token_s is not None
            times = RequestTimes(stream.arrival_s, stream.scheduled_s, stream.first_token_s, at)
            self._m.observe_finished(times, delivery.event.finish_reason or "length")

    def on_aborted(self, stream: RequestStream) -> None:
        self._m.observe_aborted()


class SimServer:
    """One simulated engine served over HTTP on `config.host`.

    `start()` binds and starts the engine loop (simulated time 0 is that moment);
    `stop()` aborts in-flight requests (their streams end with finish_reason "abort"),
    lets handlers write their last bytes, and closes the listener.
    """

    def __init__(self, engine: ServedEngine, tokenizer: PromptTokenizer, vocab_size: int,
                 cache: CacheConfig, config: ServerConfig, log: VllmLog | None = None) -> None:
        self.config = config
        self._engine = engine
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._texts = TokenTexts(tokenizer, vocab_size, config.seed)
        self._log = log
        self._ids = itertools.count()
        self._id_prefix = os.urandom(4).hex()
        self._created = int(time.time())
        self._driver: RealtimeDriver | None = None
        self.metrics = VllmMetrics(config.served_model_name, lambda: engine.stats,
                                   lambda: self._driver.num_pending if self._driver else 0, cache)
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._open_handlers = 0
        self.port = config.port

    @property
    def driver(self) -> RealtimeDriver:
        if self._driver is None:
            raise RuntimeError("the server is not started")
        return self._driver

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[_api_errors], client_max_size=64 * 2**20)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/version", self._version)
        app.router.add_post("/reset_prefix_cache", self._reset_prefix_cache)
        return app

    async def start(self) -> int:
        """Bind, start the engine loop; return the port listened on."""
        clock = VirtualClock(self.config.time_scale)
        self._driver = RealtimeDriver(self._engine, clock, _MetricsObserver(self.metrics))
        # handler_cancellation: a client that goes away cancels its handler, which aborts
        # the request in the engine (as vLLM does).
        self._runner = web.AppRunner(self._app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        engine_task = asyncio.create_task(self._driver.run())
        engine_task.add_done_callback(self._engine_stopped)
        self._tasks.append(engine_task)
        if self._log is not None:
            self._tasks.append(asyncio.create_task(self._log_stats(self._log)))
        return self.port

    async def stop(self, grace_s: float = 5.0) -> None:
        """Abort in-flight requests, let their handlers finish (up to `grace_s`), close."""
        if self._driver is not None:
            self._driver.close()
        deadline = time.monotonic() + grace_s
        while self._open_handlers and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _engine_stopped(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self._log is not None:
            self._log.info("EngineCore", "core.py:1009",
                           f"EngineCore encountered a fatal error: {task.exception()!r}")

    async def _log_stats(self, log: VllmLog) -> None:
        driver = self.driver
        line = StatsLine(self._engine.stats, driver.clock.now_s())
        while True:
            await asyncio.sleep(self.config.stats_interval_s)
            stats = self._engine.stats
            text = line.next(stats, stats.waiting + driver.num_pending, driver.clock.now_s())
            if text is not None:
                log.info("APIServer", "loggers.py:259", text)

    # -- generation ---------------------------------------------------------------------

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    def _check_model(self, model: str) -> None:
        if model and model != self.config.served_model_name:
            raise model_not_found(model)

    async def _prompt_ids(self, params: GenerationParams) -> tuple[int, ...]:
        if params.prompt_ids is not None:
            bad = [i for i in params.prompt_ids if i >= self._vocab_size]
            if bad:
                raise ApiError(400, f"Token id {bad[0]} is out of vocabulary "
                                    f"(vocab size {self._vocab_size}).", param="prompt")
            return params.prompt_ids
        text = params.prompt_text if params.messages is None else render_chat(params.messages)
        assert text is not None
        # Off the event loop: a long prompt must not delay other requests' tokens.
        return tuple(await asyncio.to_thread(self._tokenizer.encode, text))

    def _max_tokens(self, params: GenerationParams, prompt_len: int) -> int:
        limit = self.config.max_model_len
        if prompt_len < 1:
            raise ApiError(400, "The prompt is empty: it must hold at least one token.",
                           param="prompt")
        if prompt_len >= limit:
            raise ApiError(400, rejection_message(prompt_len, 1, limit))
        if params.max_tokens is not None:
            wanted = params.max_tokens
            if prompt_len + wanted > limit:
                raise ApiError(400, rejection_message(prompt_len, wanted, limit))
            return wanted
        room = limit - prompt_len
        return min(COMPLETIONS_DEFAULT_MAX_TOKENS, room) if params.kind == "completion" else room

    async def _generate(self, request: web.Request, kind: Kind) -> web.StreamResponse:
        params = parse_generation(parse_json(await request.read()), kind)
        self._check_model(params.model)
        ids = await self._prompt_ids(params)
        max_tokens = self._max_tokens(params, len(ids))
        index = next(self._ids)
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{self._id_prefix}{index:08x}"
        driver = self.driver
        try:
            stream = driver.submit(rid, ids, max_tokens)
        except RuntimeError as exc:
            raise ApiError(503, str(exc), "ServiceUnavailableError") from exc
        head = ResponseHead(kind, rid, int(time.time()), self.config.served_model_name,
                            f"servelab-sim-{SIM_VERSION}")
        text = self._texts.for_request(index)
        headers = {ARRIVAL_HEADER: f"{stream.arrival_s:.6f}"}
        self._open_handlers += 1
        try:
            if params.stream:
                return await stream_reply(request, params, head, stream, text, headers)
            return await collect_reply(head, stream, text, headers)
        except ConnectionError:
            return web.Response(status=499)  # the client is gone; nobody reads this
        finally:
            self._open_handlers -= 1
            driver.abort(rid)  # a no-op once the request finished

    # -- the other routes ---------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        name = self.config.served_model_name
        card = {"id": name, "object": "model", "created": self._created, "owned_by": "vllm",
                "root": self.config.model, "parent": None,
                "max_model_len": self.config.max_model_len}
        return web.json_response({"object": "list", "data": [card]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _reset_prefix_cache(self, request: web.Request) -> web.Response:
        # vLLM's (dev-mode) answer: {"success": false} while requests hold blocks.
        success = self._engine.reset_prefix_cache()
        if self._log is not None:
            self._log.info("APIServer", "api_router.py:39", "Resetting prefix cache...")
        return web.json_response({"success": success})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": SIM_VERSION})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        kind: Kind = "chat" if "messages" in body else "completion"
        params = parse_generation(body, kind)
        self._check_model(params.model)
        ids = await self._prompt_ids(params)
        return web.json_response({"count": len(ids), "max_model_len": self.config.max_model_len,
                                  "tokens": list(ids), "token_strs": None})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})


@web.middleware
async def _api_errors(request: web.Request, handler: web.Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
