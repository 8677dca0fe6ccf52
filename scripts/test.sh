#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet -e ".[dev]"
# PDF parsing imports unstructured-inference; its declared deps (timm, torchvision, GUI opencv) are not needed
python -c "import unstructured_inference" 2>/dev/null \
    || python -m pip install --quiet --no-deps "unstructured-inference==1.6.14"
# parser: PDF rasterising (poppler) and OCR (tesseract with Simplified Chinese + English, and its orientation and
# script detection data), libmagic for type sniffing
{ command -v pdftoppm && tesseract --list-langs 2>/dev/null | grep -q chi_sim \
    && tesseract --list-langs 2>/dev/null | grep -qx osd && ldconfig -p | grep -q libmagic.so.1; } >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq poppler-utils tesseract-ocr tesseract-ocr-chi-sim \
         tesseract-ocr-osd libmagic1; }
# parser: legacy .doc/.xls/.ppt are converted by headless LibreOffice (the GUI-less packages are enough)
command -v soffice >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
    libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui; }
# ingestion tests start their own Redis (broker of the Celery workers)
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; }
# control-plane contract tests run a real PostgreSQL 15 server (started by the tests as the `postgres` user)
[ -x /usr/lib/postgresql/15/bin/initdb ] || { apt-get update -qq && apt-get install -y -qq postgresql-15; }
command -v setpriv >/dev/null || { apt-get update -qq && apt-get install -y -qq util-linux; }  # drops root for the test PostgreSQL
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

# The containers tier (docs/deploy.md, "Containers under podman"; podman needs root) runs when this
# script is called without arguments, as CI (.ci/run) calls it; RAGKB_CONTAINERS=0 skips it, =1 adds it
# to a selection of tests. Its images are built while the default suite runs (the build is mostly
# downloads, unpacking and layer commits; niced, so the suite keeps the CPU), cached between runs by
# podman's storage and the wheelhouse (~/.cache/ragkb/wheels). Both the build and the tier are
# time-boxed: overrunning either fails the run.
BUILD_MINUTES=50
TIER_MINUTES=25
containers="${RAGKB_CONTAINERS:-$([ $# -eq 0 ] && echo 1 || echo 0)}"
if [ "$containers" = 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "the containers tier needs root (podman); RAGKB_CONTAINERS=0 skips it" >&2; exit 1; }
    mkdir -p .pytest_cache/containers-logs
    build_log=.pytest_cache/containers-logs/build_images.log
    timeout -k 60 "${BUILD_MINUTES}m" nice -n 10 bash scripts/containers/build_images.sh >"$build_log" 2>&1 &
    build_pid=$!
fi
suite=0
python -m pytest --durations=25 "$@" || suite=$?  # the slowest tests, for keeping the suite short
[ "$containers" = 1 ] || exit "$suite"

overran() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }  # timeout(1): the time box ran out (then SIGKILL)
build=0
wait "$build_pid" || build=$?
if [ "$build" -ne 0 ]; then
    tail -n 30 "$build_log" >&2
    if overran "$build"; then
        echo "FAILED: building the container images took longer than their ${BUILD_MINUTES}-minute time box" >&2
    else
        echo "FAILED: building the container images (exit $build; log in $build_log)" >&2
    fi
    exit 1
fi
grep '^built:' "$build_log"
# SIGINT first, so that pytest tears the compose stack down
tier=0
timeout -s INT -k 120 "${TIER_MINUTES}m" python -m pytest -m containers tests/containers || tier=$?
if overran "$tier"; then
    echo "FAILED: the containers tier took longer than its ${TIER_MINUTES}-minute time box" >&2
fi
[ "$suite" -eq 0 ] && [ "$tier" -eq 0 ]
