"""Hardware: the GPU catalog (datasheet figures) and probing the local GPUs."""

from servelab.hardware.catalog import GPUSpec, Interconnect, get_gpu, list_gpus, match_gpu

__all__ = ["GPUSpec", "Interconnect", "get_gpu", "list_gpus", "match_gpu"]
