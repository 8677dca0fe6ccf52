#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet -e ".[dev]"
# kustomize renders the Kubernetes overlays for validation (Go module proxy; cached after the first build)
command -v kustomize >/dev/null || [ -x "$(go env GOPATH)/bin/kustomize" ] \
    || go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0
export PATH="$PATH:$(go env GOPATH)/bin"
python -m pytest "$@"
