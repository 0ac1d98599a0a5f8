# Tandem's worker on TensorRT-LLM 1.2.1 (the version engines/trtllm/ mirrors).
#   docker build -f images/tandem-trtllm.Dockerfile -t ghcr.io/tandem-dev/tandem-trtllm:0.1.0 .
# NVIDIA's release image is multi-arch (amd64 for B200/Hopper, arm64 for GB200) and
# already carries TensorRT-LLM, NIXL and UCX; Tandem adds only its own Python code.
# Not built in CI (no container engine, and the base image is not reachable there).
FROM nvcr.io/nvidia/tensorrt-llm/release:1.2.1
WORKDIR /opt/tandem
COPY pyproject.toml README.md ./
COPY services services
COPY operators operators
# --no-deps: keep the image's own torch, numpy, grpc and NIXL builds; add only what the
# base image lacks.
RUN pip install --no-deps . \
    && pip install "pydantic>=2.7,<3" "cel-python>=0.5,<1" "prometheus-client>=0.20,<1" \
       "starlette>=0.37,<1" "uvicorn>=0.29,<1" "httpx>=0.27,<1" "threadpoolctl>=3.1,<4" \
       "openai-harmony>=0.0.8,<0.1" "nvidia-ml-py>=12.570,<14"
ENTRYPOINT ["python", "-m"]
CMD ["tandem.worker", "--help"]
