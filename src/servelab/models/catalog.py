"""The offline model catalog and `load_model`: names, aliases, quantized suffixes, files.

A model is named by its HF id (`Qwen/Qwen3-14B`), the part after the slash (`Qwen3-14B`,
any case), a listed alias (`llama-3.3-70b`), any of those with a quantization suffix
(`-AWQ`, `-FP8`, `-GPTQ-Int4`, `-W8A8`, `-Int8`), or a path to a `config.json` or to a model
directory holding one. Configs ship under `servelab/data/models/` (package data).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError
from servelab.models.config import geometry_from_config, normalize_quantization, with_quantization
from servelab.models.geometry import ModelGeometry

# Longest first, so "-gptq-int4" wins over "-int4".
QUANT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("-gptq-int4", "gptq"), ("-gptq", "gptq"), ("-awq", "awq"), ("-fp8-dynamic", "fp8"),
    ("-fp8", "fp8"), ("-w8a8", "int8"), ("-int8", "int8"),
)


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One catalog model: its canonical name, config file and accepted names."""

    name: str
    config_file: str
    aliases: tuple[str, ...]


def _data_dir() -> Any:
    return resources.files("servelab").joinpath("data", "models")


def catalog_entries() -> tuple[CatalogEntry, ...]:
    """Every model in the offline catalog."""
    index = json.loads(_data_dir().joinpath("catalog.json").read_text(encoding="utf-8"))
    return tuple(CatalogEntry(m["name"], m["config"], tuple(m.get("aliases", ())))
                 for m in index["models"])


def list_models() -> tuple[str, ...]:
    """Canonical names of the catalog's models."""
    return tuple(e.name for e in catalog_entries())


def _names(entry: CatalogEntry) -> tuple[str, ...]:
    short = entry.name.split("/", 1)[-1]
    return tuple(n.lower() for n in (entry.name, short, *entry.aliases))


def _split_suffix(name: str) -> tuple[str, str | None]:
    lowered = name.lower()
    for suffix, fmt in QUANT_SUFFIXES:
        if lowered.endswith(suffix):
            return name[: -len(suffix)], fmt
    return name, None


def _find(name: str) -> CatalogEntry | None:
    wanted = name.strip().lower()
    for entry in catalog_entries():
        if wanted in _names(entry):
            return entry
    return None


def _unknown(name: str) -> ServelabError:
    every = [n for e in catalog_entries() for n in (e.name, e.name.split("/", 1)[-1])]
    close = difflib.get_close_matches(name, every, n=4, cutoff=0.5)
    close += [n for n in difflib.get_close_matches(name.lower(), [n.lower() for n in every],
                                                   n=4, cutoff=0.5) if n not in close]
    hint = f"; close: {', '.join(dict.fromkeys(close))}" if close else ""
    return ServelabError(
        f"unknown model {name!r} (not a catalog name and no such config.json or directory)"
        f"{hint}. Catalog: {', '.join(list_models())}")


def _read_config(path: Path) -> dict[str, Any]:
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ServelabError(f"{path}: no config.json there") from None
    except json.JSONDecodeError as exc:
        raise ServelabError(f"{file}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ServelabError(f"{file}: a config.json must hold a JSON object")
    return data


def load_model(name_or_path: str, quantization: str | None = None) -> ModelGeometry:
    """The geometry of a catalog model or of a config.json file / model directory.

    `quantization` is vLLM's `--quantization` value ("awq", "gptq", "fp8", "int8"/"w8a8";
    None = as the checkpoint is stored, bf16 for the catalog's base names). A name suffix
    (`-AWQ`) does the same; suffix and argument must agree.
    """
    path = Path(name_or_path).expanduser()
    looks_like_path = "/" in name_or_path and (path.exists() or name_or_path.startswith((".", "/", "~")))
    if looks_like_path or path.suffix == ".json":
        model = geometry_from_config(_read_config(path), str(name_or_path))
        return with_quantization(model, quantization)
    entry = _find(name_or_path)
    suffix_fmt: str | None = None
    if entry is None:
        base, suffix_fmt = _split_suffix(name_or_path)
        entry = _find(base) if suffix_fmt else None
    if entry is None:
        raise _unknown(name_or_path)
    if suffix_fmt and quantization and normalize_quantization(quantization) != suffix_fmt:
        raise ServelabError(f"model name {name_or_path!r} says {suffix_fmt} but "
                            f"quantization={quantization!r}")
    config = json.loads(_data_dir().joinpath(entry.config_file).read_text(encoding="utf-8"))
    display = entry.name + (name_or_path[len(_split_suffix(name_or_path)[0]):] if suffix_fmt else "")
    model = geometry_from_config(config, display)
    return with_quantization(model, quantization or suffix_fmt)
