"""GPU catalog: lookups, aliases, nvidia-smi matching, datasheet figures."""

from __future__ import annotations

import pytest

from servelab.errors import ServelabError
from servelab.hardware.catalog import get_gpu, list_gpus, match_gpu


def test_lookup_is_case_and_punctuation_insensitive():
    assert get_gpu("h200").name == get_gpu("NVIDIA H200").name == "H200"
    assert get_gpu("a100-80gb").name == "A100-SXM-80GB"
    assert get_gpu("rtx pro 6000").name == "RTX PRO 6000"


def test_unknown_gpu_names_close_matches():
    with pytest.raises(ServelabError, match="unknown GPU 'H10'.*close: .*H100"):
        get_gpu("H10")


@pytest.mark.parametrize(("smi_name", "mib", "expected"), [
    ("NVIDIA H200", 143771, "H200"),
    ("NVIDIA H100 80GB HBM3", 81559, "H100-SXM"),
    ("NVIDIA H100 PCIe", 81559, "H100-PCIE"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-SXM-40GB"),
    ("NVIDIA A100-SXM4-80GB", 81920, "A100-SXM-80GB"),
    ("NVIDIA A100 80GB PCIe", 81920, "A100-PCIE-80GB"),
    ("NVIDIA L40S", 46068, "L40S"),
    ("Tesla T4", 15360, "T4"),
    ("NVIDIA GeForce RTX 4090", 24564, "RTX 4090"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "RTX PRO 6000"),
    ("NVIDIA H200", None, "H200"),
])
def test_match_nvidia_smi_names(smi_name, mib, expected):
    spec = match_gpu(smi_name, mib)
    assert spec is not None and spec.name == expected


def test_match_rejects_unknown_and_mig_slices():
    assert match_gpu("NVIDIA H100 NVL", 95830) is None  # not in the catalog
    assert match_gpu("NVIDIA H200", 71000) is None  # a MIG slice: memory far from the card's
    assert match_gpu("Matrox G200", 8) is None


def test_figures_and_fp8_support():
    h200, l40s, a100, t4 = (get_gpu(n) for n in ("H200", "L40S", "A100", "T4"))
    assert h200.memory_mib == 143_771 and h200.cuda_total_bytes == 150_109_880_320
    assert l40s.memory_mib == 46_068 and l40s.memory_bandwidth_gbs == 864
    assert h200.fp8_supported and l40s.fp8_supported
    assert not a100.fp8_supported and a100.dense_fp8_tflops is None and not t4.fp8_supported
    assert h200.interconnect.kind == "nvlink" and h200.interconnect.bandwidth_gbs == 900
    assert l40s.interconnect.describe() == "PCIe Gen4 64 GB/s"
    for spec in list_gpus():
        assert spec.dense_int8_tops >= spec.dense_bf16_tflops > 0 and spec.source
        assert (spec.dense_fp8_tflops is not None) == spec.fp8_supported
