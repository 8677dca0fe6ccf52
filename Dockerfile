# syntax=docker/dockerfile:1
# One image for every ragkb service; compose and Kubernetes pick the process with
# `python -m services.<name>.main`. Build from the repository root:
#   docker build -t ragkb .
# Health is checked by the orchestrator over gRPC (scripts/grpc_health_check.py in
# compose, the native gRPC probe in Kubernetes), so the image declares no HEALTHCHECK.
#
# Layers go from the least to the most often changed, so that a change to the sources rebuilds
# seconds of work: system packages, torch, the project's dependencies (read from pyproject.toml
# alone), then the project itself, installed without dependencies from a wheel built in a stage
# of its own. The venv is built in place: copying it from a build stage would copy (and on every
# rebuild hash) its several GB.

ARG PYTHON_IMAGE=python:3.11-slim

# The project's own (pure Python) wheel; its sources stay out of the image.
FROM ${PYTHON_IMAGE} AS wheel
ARG PIP_INDEX_OPTS=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto/ proto/
COPY shared/ shared/
COPY services/ services/
COPY ragkb/ ragkb/
RUN python -m venv /tmp/venv && /tmp/venv/bin/pip wheel ${PIP_INDEX_OPTS} --no-deps -w /dist .

FROM ${PYTHON_IMAGE} AS runtime
# Extra pip options for the installs: a mirror, or a smaller CPU-only torch, e.g.
#   --build-arg PIP_INDEX_OPTS="--extra-index-url https://download.pytorch.org/whl/cpu"
# (PyPI's Linux torch wheel is the CUDA build, several GB with its nvidia packages.)
ARG PIP_INDEX_OPTS=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# parser: PDF rasterising (poppler), OCR for scans and images (tesseract, Simplified Chinese + English, and its
# orientation/script detection), libmagic, and headless LibreOffice for legacy .doc/.xls/.ppt
RUN apt-get update \
    && apt-get install -y --no-install-recommends poppler-utils tesseract-ocr tesseract-ocr-chi-sim \
       tesseract-ocr-osd libmagic1 libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui \
    && rm -rf /var/lib/apt/lists/*
# /data owned by uid 10001: a named volume mounted there starts with this owner
RUN groupadd --gid 10001 ragkb \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin ragkb \
    && mkdir /data && chown 10001:10001 /data
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch is most of the image: a layer of its own, installed with the project's setuptools pin
# (pymilvus imports pkg_resources) so that the dependencies' layer keeps this torch
RUN pip install ${PIP_INDEX_OPTS} "torch>=2.2" "setuptools>=69,<70"
# the dependencies as `pip install .` would resolve them, from pyproject.toml only: this layer is
# rebuilt when pyproject.toml changes, not when the sources do.
# PDF parsing imports unstructured-inference; its declared deps (timm, torchvision, GUI opencv) are not needed
COPY pyproject.toml /opt/ragkb/pyproject.toml
RUN python -c "import sys, tomllib; print('\n'.join(tomllib.load(open(sys.argv[1], 'rb'))['project']['dependencies']))" \
       /opt/ragkb/pyproject.toml >/opt/ragkb/requirements.txt \
    && pip install ${PIP_INDEX_OPTS} -r /opt/ragkb/requirements.txt \
    && pip install ${PIP_INDEX_OPTS} --no-deps "unstructured-inference==1.6.14"
COPY --from=wheel /dist/ /opt/ragkb/dist/
RUN pip install --no-deps /opt/ragkb/dist/*.whl
WORKDIR /app
COPY scripts/grpc_health_check.py scripts/grpc_health_check.py
# The root filesystem is read-only in Kubernetes: caches (torch, Hugging Face, jieba)
# and Milvus Lite's socket go to /tmp, which is writable everywhere.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    XDG_CACHE_HOME=/tmp/cache \
    RAGKB_DATA_DIR=/data \
    RAGKB_HOST=0.0.0.0
# numeric, so Kubernetes runAsNonRoot can verify it without reading /etc/passwd
USER 10001:10001
CMD ["python", "-m", "services.gateway.main"]
