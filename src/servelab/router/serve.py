"""Running the router until SIGTERM/SIGINT, then draining: stop accepting connections,
answer 503 to requests arriving on open ones, let in-flight requests finish (up to
`drain_timeout_s`), exit 0."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import sys

from servelab.errors import ServelabError
from servelab.router.config import RouterConfig
from servelab.router.httpserver import HttpServer
from servelab.router.proxy import Router

log = logging.getLogger("servelab.router")


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServelabError(f"--host {host} --port {port}: cannot listen ({exc.strerror})") from None
    return sock


async def serve(config: RouterConfig) -> None:
    """Serve until a signal, then drain. Prints `listening on URL` once ready."""
    router = Router(config)
    await router.start()
    # Everything allocated so far (modules, config, metrics) lives as long as the process:
    # keep it out of the collector's full passes, which would otherwise walk it all.
    gc.freeze()
    server = HttpServer(router.handle, router.refused, max_body_bytes=config.max_body_bytes)
    sock = _listen(config.host, config.port)
    await server.start(sock, backlog=4096)
    host, port = sock.getsockname()[:2]
    healthy = sum(b.healthy for b in router.pool.backends)
    print(f"servelab route: policy {config.policy}, {healthy}/{len(router.pool)} backends "
          f"healthy; listening on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print(f"servelab route: draining {router.active} requests", file=sys.stderr, flush=True)
    server.stop_listening()  # new connections are refused; requests on open ones get 503
    try:
        await asyncio.wait_for(router.drained(), timeout=config.drain_timeout_s)
    except asyncio.TimeoutError:
        log.warning("drain timeout: %d requests still in flight", router.active)
    server.close()
    await router.stop()
    # Drained: a repeated SIGTERM from a supervisor must not turn the exit status into
    # "killed" while the interpreter winds down (closing the loop would restore SIG_DFL).
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)


def run(config: RouterConfig) -> None:
    """Blocking entry point (uvloop where available)."""
    logging.basicConfig(level=logging.INFO if config.explain else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        loop_factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(config))
