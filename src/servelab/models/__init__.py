"""Model catalog and geometry: parameters, weight bytes, KV bytes per token, FLOPs, MoE.

`load_model("Qwen/Qwen3-14B")` (or a short alias, a quantized suffix such as `-AWQ`, or a
config.json path / model directory) returns a frozen `ModelGeometry`.
"""

from servelab.models.catalog import list_models, load_model
from servelab.models.config import geometry_from_config, normalize_quantization
from servelab.models.geometry import KVCacheDType, LinearShape, ModelGeometry, WeightFormat

__all__ = [
    "KVCacheDType",
    "LinearShape",
    "ModelGeometry",
    "WeightFormat",
    "geometry_from_config",
    "list_models",
    "load_model",
    "normalize_quantization",
]
