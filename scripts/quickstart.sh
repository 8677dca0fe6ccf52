#!/usr/bin/env bash
# The main job on the embedded default: install, start every service in one
# process, ingest the bundled English + Chinese samples, ask questions.
# Data goes to $RAGKB_DATA_DIR (default ~/.ragkb); stop with `ragkb down`.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet -e .
python -m ragkb up
python -m ragkb ingest samples/en samples/zh --kb demo
python -m ragkb ask "How long does it take to charge the AMR-7 from 20% to 80%?" --kb demo
echo
python -m ragkb ask "AMR-7 的最大载重是多少？" --kb demo
echo
echo "ragkb is still running (REST on http://127.0.0.1:${RAGKB_HTTP_PORT:-8780}, API docs at /docs); stop it with: ragkb down"
