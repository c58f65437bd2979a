"""The Ray cluster servelab runs on: connecting, its nodes, and the probe run on each node.

Ray is an optional extra (``pip install 'servelab[ray]'``); nothing outside
`servelab.distributed` imports it, and `ray_module` turns its absence into one clear error.
Every node must have servelab installed (the same version: arms are pickled to it).
"""

from __future__ import annotations

import socket
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict

from servelab.distributed.placement import NodeResources
from servelab.errors import ServelabError
from servelab.hardware.probe import ProbeResult, probe

CONNECT_TIMEOUT_S = 5.0


def ray_module() -> ModuleType:
    """The `ray` package, or `ServelabError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ServelabError("--ray / cluster.ray needs Ray: pip install 'servelab[ray]'") from None
    return ray


def connect(address: str) -> ModuleType:
    """Connect this process to the cluster at `address` (``auto``: the local one); the
    connected `ray` module. An address nothing answers on is a `ServelabError` naming it."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    _check_reachable(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False,
                 include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ServelabError(f"--ray {address}: cannot connect to a Ray cluster ({exc})") from None
    return ray


def _check_reachable(address: str) -> None:
    """Refuse a HOST:PORT that nothing answers on within a few seconds: Ray itself would
    retry for minutes before saying so."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise ServelabError(f"--ray {address}: give HOST:PORT of the cluster's head (or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ServelabError(f"--ray {address}: no Ray head answers there "
                            f"({exc.strerror or exc})") from None


def cluster_nodes(ray: ModuleType) -> list[NodeResources]:
    """Every node the cluster knows (dead ones with `alive` False), GPUs as Ray counts them."""
    return [NodeResources(node_id=n["NodeID"], address=n.get("NodeManagerAddress", "?"),
                          gpus=int(n.get("Resources", {}).get("GPU", 0)), alive=bool(n.get("Alive")))
            for n in ray.nodes()]


class NodeProbe(BaseModel):
    """One node's probe: Ray's view (id, address, GPU and CPU resources) and what
    `servelab probe` found on it."""

    model_config = ConfigDict(extra="forbid")

    node_id: str
    address: str
    ray_gpus: float
    ray_cpus: float
    probe: ProbeResult


def _probe_here() -> dict[str, Any]:
    return probe().model_dump(mode="json")


def probe_nodes(ray: ModuleType) -> list[NodeProbe]:
    """`servelab probe` on every live node, as a Ray task pinned to that node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0)(_probe_here)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in alive]
    out = []
    for node, result in zip(alive, ray.get(refs)):
        res = node.get("Resources", {})
        out.append(NodeProbe(node_id=node["NodeID"], address=node.get("NodeManagerAddress", "?"),
                             ray_gpus=float(res.get("GPU", 0)), ray_cpus=float(res.get("CPU", 0)),
                             probe=ProbeResult.model_validate(result)))
    return out
