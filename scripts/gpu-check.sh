#!/usr/bin/env bash
# The checks only a GPU node can run, inside the trtllm image (docs/gpu-deployment.md,
# "The GPU check"): Tandem's trtllm engine on a small model (a prefill -> decode handoff
# through TensorRT-LLM's NIXL cache transceiver) and a NIXL VRAM-to-VRAM transfer.
#   scripts/gpu-check.sh MODEL_DIR [IMAGE] [-- EXTRA ARGS for python -m tandem_dev.gpu_check]
# Exit status: 0 passed, 1 a check failed, 2 usage or no container runtime, 3 no GPU here
# ("no GPU: skipped": nothing was checked, which is not a pass).
set -euo pipefail

if [[ $# -lt 1 || $1 == -* ]]; then
  echo "usage: $0 MODEL_DIR [IMAGE] [-- --vocab-size N --eos-token-id N]" >&2
  exit 2
fi
model=$1
shift
image=ghcr.io/tandem-dev/tandem-trtllm:0.1.0
if [[ $# -gt 0 && $1 != -- ]]; then
  image=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Checked on the host before any image is pulled: a node without a driver has no GPU
# a container could be given.
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU: skipped (nvidia-smi lists none on $(hostname)); nothing was checked"
  exit 3
fi
if [[ ! -d $model ]]; then
  echo "gpu-check: no model directory at $model" >&2
  exit 2
fi
model=$(realpath "$model")
# docker takes --gpus; podman takes the NVIDIA Container Toolkit's CDI device name.
if command -v docker >/dev/null; then
  runtime=(docker run --gpus all)
elif command -v podman >/dev/null; then
  runtime=(podman run --device nvidia.com/gpu=all)
else
  echo "gpu-check: needs docker or podman to run $image" >&2
  exit 2
fi
# The dev package (where the check lives) is mounted, not baked into the product image;
# --ipc=host and an unlimited memlock are what TensorRT-LLM's and UCX's shared-memory and
# pinned-memory paths need, as NVIDIA's own run instructions for the image say.
exec "${runtime[@]}" --rm --ipc=host --ulimit memlock=-1 \
  -v "$model:/model:ro" -v "$repo/dev:/opt/tandem-dev:ro" -e PYTHONPATH=/opt/tandem-dev \
  --entrypoint python3 "$image" -m tandem_dev.gpu_check --model /model "$@"
