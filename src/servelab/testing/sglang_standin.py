"""A stand-in for SGLang's launch server where SGLang cannot run (CI has no GPU): its command
line and its multi-node launch, with the token server as rank 0's HTTP.

SGLang runs a replica that spans nodes as one process per node, all with the same flags
but `--node-rank`, meeting at `--dist-init-addr` (rank 0's node); only rank 0 serves HTTP,
and only once every rank has joined. This program keeps exactly that contract, so
servelab's placement and launch of such an arm (which process on which node, with which
flags, who waits for whom, who stops whom) are tested for real over TCP:

- rank 0 listens on `--dist-init-addr`, logs each rank that joins (its pid and
  `CUDA_VISIBLE_DEVICES`), and after `--nnodes - 1` of them serves the token server on
  `--host`/`--port`; a rank that leaves ends it with exit code 1 (SGLang's NCCL group
  would fail the same way);
- a rank above 0 connects to `--dist-init-addr` (retrying while rank 0 starts), reports
  itself, and exits when rank 0's connection closes.

    python -m servelab.testing.sglang_standin --model-path M --nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:29500

Tests make it importable as `sglang.launch_server` (a package directory with a
`sglang` distribution's metadata, so `importlib.metadata.version("sglang")` answers).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time

from servelab.testing import token_server

JOIN_TIMEOUT_S = 120.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch_server.py", description="servelab's stand-in for SGLang's launch_server.")
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "--pp-size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--load-format", default="auto")
    p.add_argument("--quantization", default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    return p


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host, int(port)


def _say(line: str) -> None:
    print(line, flush=True)


def _serve_rank0(a: argparse.Namespace) -> None:
    peers: list[socket.socket] = []
    if a.nnodes > 1:
        listener = socket.create_server(_address(a.dist_init_addr))
        listener.settimeout(JOIN_TIMEOUT_S)
        _say(f"rank 0 of {a.nnodes} (pid {os.getpid()}, CUDA_VISIBLE_DEVICES="
             f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')}) waits at {a.dist_init_addr}")
        while len(peers) < a.nnodes - 1:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                _say(f"only {len(peers) + 1} of {a.nnodes} ranks joined in {JOIN_TIMEOUT_S:.0f} s")
                sys.exit(1)
            _say(conn.makefile("r").readline().strip())
            peers.append(conn)
        listener.close()
        for conn in peers:
            threading.Thread(target=_watch, args=(conn,), daemon=True).start()
    _say(f"all {a.nnodes} ranks joined; serving on {a.host}:{a.port}")
    token_server.main(["--host", a.host, "--port", str(a.port), "--itl-ms", "1",
                       "--model", a.served_model_name or a.model_path])


def _watch(conn: socket.socket) -> None:
    """A rank that leaves takes the replica down, as a broken NCCL group does."""
    conn.recv(1)
    _say("a rank left: exiting")
    os._exit(1)


def _join(a: argparse.Namespace) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        try:
            conn = socket.create_connection(_address(a.dist_init_addr), timeout=5.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                _say(f"rank {a.node_rank}: nobody at {a.dist_init_addr} after {JOIN_TIMEOUT_S:.0f} s")
                sys.exit(1)
            time.sleep(0.2)
    hello = (f"rank {a.node_rank} joined (pid {os.getpid()}, CUDA_VISIBLE_DEVICES="
             f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')})")
    conn.sendall((hello + "\n").encode())
    _say(hello)
    conn.settimeout(None)
    conn.recv(1)  # rank 0 gone
    _say(f"rank {a.node_rank}: rank 0 closed; exiting")


def main(argv: list[str] | None = None) -> None:
    a = _parser().parse_args(argv)
    if a.nnodes > 1 and a.dist_init_addr is None:
        sys.exit("--nnodes > 1 needs --dist-init-addr")
    if a.node_rank == 0:
        _serve_rank0(a)
    else:
        _join(a)


if __name__ == "__main__":
    main()
