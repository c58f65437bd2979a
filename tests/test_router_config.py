"""The router's settings: YAML file plus flags, unknown keys named, types checked."""

from __future__ import annotations

import pytest

from servelab.errors import ServelabError
from servelab.router.config import build_config


def test_file_then_flags_override(tmp_path):
    f = tmp_path / "router.yaml"
    f.write_text("backends: [http://127.0.0.1:9001/]\npolicy: cache_aware\n"
                 "policy_params: {balance_abs_threshold: 8}\nport: 9000\n")
    cfg = build_config(f, {"port": 9100})
    assert cfg.backends == ["http://127.0.0.1:9001"]
    assert (cfg.policy, cfg.port, cfg.host) == ("cache_aware", 9100, "127.0.0.1")
    assert cfg.typed_policy_params() == {"balance_abs_threshold": 8}


def test_unknown_key_is_named(tmp_path):
    f = tmp_path / "router.yaml"
    f.write_text("backends: [http://127.0.0.1:9001]\nretries: 3\n")
    with pytest.raises(ServelabError, match=r"router.yaml: retries: unknown key"):
        build_config(f, {})


def test_bad_values_are_named():
    with pytest.raises(ServelabError, match="backend 'localhost:80' is not http"):
        build_config(None, {"backends": ["localhost:80"]})
    with pytest.raises(ServelabError, match="unknown policy 'fast'"):
        build_config(None, {"backends": ["http://127.0.0.1:1"], "policy": "fast"})
    with pytest.raises(ServelabError, match="balance_abs_threshold='x': expected int"):
        build_config(None, {"backends": ["http://127.0.0.1:1"], "policy": "cache_aware",
                            "policy_params": {"balance_abs_threshold": "x"}})
    with pytest.raises(ServelabError, match="has no parameter 'vnodes'"):
        build_config(None, {"backends": ["http://127.0.0.1:1"], "policy_params": {"vnodes": 3}})


def test_api_key_is_not_in_repr():
    cfg = build_config(None, {"backends": ["http://127.0.0.1:1"], "api_key": "s3cret"})
    assert "s3cret" not in repr(cfg) and cfg.resolved_api_key() == "s3cret"
