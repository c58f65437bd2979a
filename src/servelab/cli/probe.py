"""`servelab probe`: the GPUs of this machine and the links between them."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console

from servelab.cli.output import make_console
from rich.table import Table

from servelab.hardware.probe import ProbeResult, probe


def _show(value: object, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def _host_line(result: ProbeResult) -> str | None:
    h = result.host
    if h is None:
        return None
    return (f"host CPU: {h.cpu_model or 'model not reported'}, {_show(h.logical_cpus)} logical CPUs; "
            f"single-thread Python loop {h.python_loop_ns:.1f} ns per iteration (lower is faster)")


def _render(result: ProbeResult, console: Console) -> None:
    host = _host_line(result)
    if host is not None:
        console.print(host, highlight=False)
    if not result.gpus:
        console.print(result.message or "no GPU")
        for note in result.notes:
            console.print(f"  [dim]{note}[/]", highlight=False)
        return
    table = Table(title=f"GPUs (via {result.source})")
    for column in ("#", "name", "catalog", "CC", "FP8", "memory used/total MiB", "P-state",
                   "util", "power W", "driver", "CUDA"):
        table.add_column(column)
    for gpu in result.gpus:
        fp8 = {True: "yes", False: "no", None: "-"}[gpu.fp8_supported]
        power = f"{_show(gpu.power_w)} / {_show(gpu.power_limit_w)}"
        memory = f"{_show(gpu.memory_used_mib)} / {_show(gpu.memory_total_mib)}"
        table.add_row(
            str(gpu.index), gpu.name, _show(gpu.catalog_name), _show(gpu.compute_capability), fp8,
            memory, _show(gpu.pstate), _show(gpu.utilization_pct, "%"), power,
            _show(gpu.driver_version), _show(gpu.cuda_version),
        )
    console.print(table)
    topo = result.topology
    if topo is not None and topo.gpu_count > 1:
        matrix = Table(title=f"GPU links (nvidia-smi topo -m): {topo.summary}")
        matrix.add_column("")
        for i in range(topo.gpu_count):
            matrix.add_column(f"GPU{i}")
        for i, row in enumerate(topo.matrix):
            matrix.add_row(f"GPU{i}", *row)
        console.print(matrix)
    for note in result.notes:
        console.print(f"[dim]{note}[/]", highlight=False)


def _render_nodes(nodes: list, console: Console) -> None:
    table = Table(title=f"Ray cluster: {len(nodes)} live node(s)")
    for column in ("node", "address", "Ray GPUs", "Ray CPUs", "probed GPUs", "links", "Python loop ns"):
        table.add_column(column)
    for n in nodes:
        names = ", ".join(f"{g.index}: {g.catalog_name or g.name}" for g in n.probe.gpus) or (n.probe.message or "-")
        links = n.probe.topology.summary if n.probe.topology is not None else "-"
        loop = f"{n.probe.host.python_loop_ns:.1f}" if n.probe.host is not None else "-"
        table.add_row(n.node_id[:12], n.address, f"{n.ray_gpus:g}", f"{n.ray_cpus:g}", names, links, loop)
    console.print(table)


def probe_command(
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS", help="Probe every node of this Ray cluster (auto: the local one), as one Ray task per node. Needs servelab[ray]."),
) -> None:
    """Show this machine's NVIDIA GPUs (NVML, else nvidia-smi), the links between them, and
    the host's CPU (model, single-thread Python speed: run it on an idle host).

    With no GPU it prints "no NVIDIA GPU found" and exits 0. With --ray: every node's
    resources as Ray counts them, and the same probe run on each node.
    """
    if ray is not None:
        from servelab.distributed.raycluster import connect, probe_nodes

        nodes = probe_nodes(connect(ray))
        if json_out:
            typer.echo(json.dumps([n.model_dump(mode="json") for n in nodes], indent=2))
        else:
            _render_nodes(nodes, make_console())
        return
    result = probe()
    if json_out:
        typer.echo(result.model_dump_json(indent=2))
    else:
        _render(result, make_console())


def register(app: typer.Typer) -> None:
    """Add `servelab probe` to the CLI."""
    app.command("probe")(probe_command)
