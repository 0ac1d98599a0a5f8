# The Tandem image: operator (`tandem operator run`), frontend and reference-engine
# workers (`python -m tandem.frontend`, `python -m tandem.worker`), on CPU.
#   docker build -f images/tandem.Dockerfile -t ghcr.io/tandem-dev/tandem:0.1.0 .
#   buildah bud -f images/tandem.Dockerfile -t ghcr.io/tandem-dev/tandem:0.1.0 .
# BASE_IMAGE: any Debian-based image with Python >= 3.11 and its venv module. `make
# images` passes one bootstrapped from Debian packages (no registry is reachable there).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
# The pods' user (operator, frontend, workers run as 65532 with a read-only root
# filesystem); its home is /tmp, the one writable directory the operator mounts.
RUN groupadd --gid 65532 tandem \
    && useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin tandem
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 VIRTUAL_ENV=/opt/tandem/venv
ENV PATH=/opt/tandem/venv/bin:$PATH
WORKDIR /opt/tandem/src
# Dependencies first, in their own layer: rebuilt only when the pins change, not when
# the source does. The pip cache mount keeps downloads out of the image and across builds.
COPY pyproject.toml images/requirements.py images/no-deps-requirements.txt \
    images/no-deps-harmony-requirements.txt ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv "$VIRTUAL_ENV" \
    && python requirements.py pyproject.toml multinode > requirements.txt \
    && pip install -r requirements.txt \
    && pip install --no-deps -r no-deps-requirements.txt
COPY README.md ./
COPY services services
COPY operators operators
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --no-deps . && rm -rf build tandem.egg-info
USER 65532:65532
WORKDIR /
ENTRYPOINT ["python", "-m"]
CMD ["tandem.frontend", "--help"]
