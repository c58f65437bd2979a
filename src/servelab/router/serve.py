"""Running the router until SIGTERM/SIGINT, then draining: stop accepting connections,
let in-flight requests finish (up to `drain_timeout_s`), exit 0."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys

from aiohttp import web

from servelab.errors import ServelabError
from servelab.router.config import RouterConfig
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
    runner = web.AppRunner(router.app(), access_log=None, handle_signals=False,
                           shutdown_timeout=config.drain_timeout_s)
    await runner.setup()
    sock = _listen(config.host, config.port)
    site = web.SockSite(runner, sock, backlog=4096)
    await site.start()
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
    await site.stop()  # closes the listening socket: new connections are refused
    try:
        await asyncio.wait_for(router.drained(), timeout=config.drain_timeout_s)
    except asyncio.TimeoutError:
        log.warning("drain timeout: %d requests still in flight", router.active)
    await runner.cleanup()


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
