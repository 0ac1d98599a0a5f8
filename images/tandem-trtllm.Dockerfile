# Tandem's worker on TensorRT-LLM 1.2.1 (the version engines/trtllm/ mirrors).
#   docker build -f images/tandem-trtllm.Dockerfile -t ghcr.io/tandem-dev/tandem-trtllm:0.1.0 .
#   buildah bud -f images/tandem-trtllm.Dockerfile -t ghcr.io/tandem-dev/tandem-trtllm:0.1.0 .
# BASE_IMAGE: NVIDIA's release image, multi-arch (amd64 for B200/Hopper, arm64 for GB200),
# which already carries TensorRT-LLM, NIXL, UCX and torch; Tandem adds its own code and
# whatever of its requirements the image lacks. `make images` does not build it (no GPU,
# and no registry to pull the base from, on the machines it runs on).
ARG BASE_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.2.1
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /opt/tandem/src
# Into the image's own Python, where TensorRT-LLM lives. pip installs only requirements
# that are missing or outside the project's ranges: the image's torch, numpy, grpc and
# NIXL builds stay wherever they fit. Requirements first, in their own layer.
COPY pyproject.toml images/requirements.py ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 requirements.py pyproject.toml gpu > requirements.txt \
    && pip install -r requirements.txt
COPY README.md ./
COPY services services
COPY operators operators
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-deps . && rm -rf build tandem.egg-info
WORKDIR /
ENTRYPOINT ["python", "-m"]
CMD ["tandem.worker", "--help"]
