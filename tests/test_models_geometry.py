"""Known-answer tests of model geometry: parameters, weight bytes, KV bytes, FLOPs, MoE.

Expected values are written as the hand arithmetic from each model's published config.json.
"""

from __future__ import annotations

import json

import pytest

from servelab.errors import ServelabError
from servelab.models import list_models, load_model
from servelab.models.costs import (
    decode_bytes_read,
    expected_experts_touched,
    flops_per_token,
    kv_bytes_for_context,
    kv_bytes_per_token,
)
from servelab.models.weights import checkpoint_bytes

GIB = 2**30


def test_qwen3_14b_kv_bytes_per_token_bf16_and_fp8():
    m = load_model("Qwen/Qwen3-14B")
    assert kv_bytes_per_token(m) == 2 * 40 * 8 * 128 * 2 == 160 * 1024
    assert kv_bytes_per_token(m, "fp8") == 2 * 40 * 8 * 128 * 1 == 80 * 1024


def test_qwen3_14b_parameters_by_hand():
    m = load_model("qwen3-14b")
    attention = 5120 * 5120 + 2 * 5120 * 1024 + 5120 * 5120
    mlp = 3 * 5120 * 17408
    norms = 2 * 5120 + 2 * 128
    embeddings = 2 * 151936 * 5120  # untied: embedding + LM head
    assert m.total_params == 40 * (attention + mlp + norms) + embeddings + 5120
    # bf16: 2 B per parameter; vLLM logs 27.52 GiB (27.5185 in older releases)
    assert checkpoint_bytes(m) == 2 * m.total_params
    assert checkpoint_bytes(m) / GIB == pytest.approx(27.508, abs=0.001)


def test_llama_33_70b_kv_and_weights():
    m = load_model("meta-llama/Llama-3.3-70B-Instruct")
    assert kv_bytes_per_token(m) == 2 * 80 * 8 * 128 * 2 == 320 * 1024
    per_layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert m.total_params == 80 * per_layer + 2 * 128256 * 8192 + 8192
    assert checkpoint_bytes(m) / 1e9 == pytest.approx(141.1, abs=0.1)


def test_deepseek_v3_mla_latent_kv_and_moe():
    m = load_model("deepseek-v3")
    assert m.is_mla and kv_bytes_per_token(m) == (512 + 64) * 61 * 2 == 70_272
    assert (m.num_experts, m.experts_per_token, m.shared_experts, m.dense_layers) == (256, 8, 1, 3)
    assert m.moe_layers == 58
    assert m.total_params / 1e9 == pytest.approx(671, rel=0.005)
    assert m.active_params / 1e9 == pytest.approx(37, rel=0.03)
    assert m.weight_format == "fp8" and m.fp8_block_size == 128


def test_gemma3_12b_sliding_window_layers():
    m = load_model("google/gemma-3-12b-it")
    # 5 local : 1 global over 48 layers -> 8 global (layers 5, 11, ..., 47), 40 sliding
    assert len(m.sliding_layers) == 40 and m.full_attention_layers == 8
    assert 5 not in m.sliding_layers and 4 in m.sliding_layers and m.sliding_window == 1024
    per_layer = 2 * 8 * 256 * 2
    assert kv_bytes_per_token(m) == 48 * per_layer
    assert kv_bytes_for_context(m, 8192) == per_layer * (8 * 8192 + 40 * 1024)
    assert kv_bytes_for_context(m, 512) == per_layer * 48 * 512


def test_gpt_oss_alternating_window_and_mxfp4():
    m = load_model("openai/gpt-oss-120b")
    assert m.weight_format == "mxfp4" and len(m.sliding_layers) == 18
    assert m.sliding_window == 128
    assert m.total_params / 1e9 == pytest.approx(116.8, rel=0.01)
    assert m.active_params / 1e9 == pytest.approx(5.1, rel=0.03)
    # experts at 4.25 bits, the rest bf16: the published checkpoint is about 65 GB
    assert checkpoint_bytes(m) / 1e9 == pytest.approx(65, rel=0.03)


def test_awq_bytes_include_group_scales_and_packed_zeros():
    m = load_model("Qwen/Qwen3-14B-AWQ")
    assert m.weight_format == "awq" and m.name == "Qwen/Qwen3-14B-AWQ"
    linear = 40 * (2 * 5120 * 5120 + 2 * 5120 * 1024 + 3 * 5120 * 17408)
    groups = linear // 128
    sixteen_bit = 2 * (2 * 151936 * 5120 + 40 * (2 * 5120 + 256) + 5120)
    assert checkpoint_bytes(m) == linear // 2 + 2 * groups + groups // 2 + sixteen_bit


def test_quantization_by_argument_and_suffix_agree():
    assert checkpoint_bytes(load_model("Qwen3-14B-AWQ")) == checkpoint_bytes(load_model("Qwen/Qwen3-14B", "awq"))
    fp8 = load_model("qwen3-14b", "fp8")
    # 1 B per linear weight + an fp32 scale per output channel; 16-bit embeddings
    assert checkpoint_bytes(fp8) < 0.56 * checkpoint_bytes(load_model("qwen3-14b"))
    gptq = load_model("Qwen/Qwen3-14B-GPTQ-Int4")
    assert gptq.weight_format == "gptq"
    assert load_model("qwen3-14b", "w8a8").weight_format == "int8"
    with pytest.raises(ServelabError, match="says awq"):
        load_model("Qwen3-14B-AWQ", "fp8")


def test_moe_expected_experts_touched():
    m = load_model("Qwen/Qwen3-30B-A3B")
    assert expected_experts_touched(m, 1) == pytest.approx(8)
    assert expected_experts_touched(m, 64) == pytest.approx(128 * (1 - (1 - 8 / 128) ** 64))
    assert expected_experts_touched(m, 10_000) == pytest.approx(128)
    # decode bytes grow with batch toward the full model
    small, big = decode_bytes_read(m, 1, 0), decode_bytes_read(m, 512, 0)
    assert small < 0.2 * checkpoint_bytes(m) and big == pytest.approx(checkpoint_bytes(m), rel=0.02)


def test_flops_per_token():
    m = load_model("Qwen/Qwen3-14B")
    assert flops_per_token(m, 0, decode=True) == 2 * m.active_params
    assert flops_per_token(m, 1000, decode=True) - flops_per_token(m, 0, decode=True) == 4 * 40 * 128 * 40 * 1000
    assert m.active_params == m.total_params - 151936 * 5120  # the input embedding is a lookup


def test_config_path_and_directory(tmp_path):
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 40,
           "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8,
           "head_dim": 128, "intermediate_size": 17408, "vocab_size": 151936,
           "tie_word_embeddings": False, "max_position_embeddings": 40960,
           "torch_dtype": "float16",
           "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                                   "zero_point": True, "version": "gemm"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from_dir = load_model(str(tmp_path))
    from_file = load_model(str(tmp_path / "config.json"))
    assert from_dir.weight_format == from_file.weight_format == "awq"
    assert checkpoint_bytes(from_dir) == checkpoint_bytes(load_model("Qwen3-14B-AWQ"))


def test_bad_names_and_files(tmp_path):
    with pytest.raises(ServelabError, match="close: .*Qwen3-14B"):
        load_model("Qwen/Qwen3-15B")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ServelabError, match="line 1"):
        load_model(str(bad))
    with pytest.raises(ServelabError, match="unknown quantization"):
        load_model("qwen3-14b", "int3")


def test_every_catalog_model_loads():
    for name in list_models():
        m = load_model(name)
        assert 0 < m.active_params <= m.total_params
        assert kv_bytes_per_token(m) > 0
