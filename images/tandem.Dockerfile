# The Tandem image: operator, frontend and reference-engine workers (CPU).
#   docker build -f images/tandem.Dockerfile -t ghcr.io/tandem-dev/tandem:0.1.0 .
# Not built in CI (no container engine there); the chart's pods run `python -m ...` in it.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/tandem
COPY pyproject.toml README.md ./
COPY services services
COPY operators operators
RUN pip install . \
    # NIXL without its CUDA torch dependency chain (UCX backend, DRAM on CPU).
    && pip install --no-deps nixl==1.5.1 nixl-cu12==1.5.1 \
    && useradd --uid 10001 --no-create-home tandem
USER 10001
ENTRYPOINT ["python", "-m"]
CMD ["tandem.frontend", "--help"]
