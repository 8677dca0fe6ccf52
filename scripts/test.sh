#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet -e ".[dev]"
python -m pytest "$@"
