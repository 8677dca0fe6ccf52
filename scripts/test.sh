#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet -e ".[dev]"
# PDF parsing imports unstructured-inference; its declared deps (timm, torchvision, GUI opencv) are not needed
python -c "import unstructured_inference" 2>/dev/null \
    || python -m pip install --quiet --no-deps "unstructured-inference==1.6.14"
# parser: PDF rasterising (poppler) and OCR (tesseract with Simplified Chinese + English), libmagic for type sniffing
{ command -v pdftoppm && tesseract --list-langs 2>/dev/null | grep -q chi_sim && ldconfig -p | grep -q libmagic.so.1; } \
    >/dev/null || { apt-get update -qq && apt-get install -y -qq poppler-utils tesseract-ocr tesseract-ocr-chi-sim libmagic1; }
# ingestion tests start their own Redis (broker of the Celery workers)
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; }
# control-plane contract tests run a real PostgreSQL 15 server (started by the tests as the `postgres` user)
[ -x /usr/lib/postgresql/15/bin/initdb ] || { apt-get update -qq && apt-get install -y -qq postgresql-15; }
# the /debug page test drives Debian's chromium through chromedriver (no browser download)
command -v chromedriver >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }
# a CJK font, so the page's Chinese renders in the screenshot the browser test saves
fc-list :lang=zh | grep -q . || { apt-get update -qq && apt-get install -y -qq fonts-wqy-zenhei; }
# the Elasticsearch tests run a real node: Java 17 (javac builds the launcher) and Maven (fetches the jars)
{ command -v javac && command -v mvn; } >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven; }
# kustomize renders the Kubernetes overlays for validation (Go module proxy; cached after the first build)
command -v kustomize >/dev/null || [ -x "$(go env GOPATH)/bin/kustomize" ] \
    || go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0
export PATH="$PATH:$(go env GOPATH)/bin"
python -m pytest "$@"
