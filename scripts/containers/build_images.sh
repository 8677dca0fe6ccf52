#!/usr/bin/env bash
# Build every image the container tests run, one build at a time, from packages only:
#   bash scripts/containers/build_images.sh
# 1. podman configured (setup_podman.sh) and a Python 3.11 base from Debian packages
#    (build_python_base.sh) standing in for python:3.11-slim;
# 2. a wheelhouse of torch and every dependency of the project ($RAGKB_WHEELHOUSE, default
#    ~/.cache/ragkb/wheels), filled from PyPI once (again when the content of pyproject.toml or of
#    the download command changes, not its mtime, which every clone resets; files already there are
#    not fetched again) and mounted into the builds, so torch's multi-GB CUDA wheels are downloaded
#    once per machine rather than once per build;
# 3. ragkb:latest from the unchanged Dockerfile (PYTHON_IMAGE pointing at the base, pip offline
#    from the wheelhouse); podman's layer cache makes a rebuild without changes take seconds;
# 4. the infrastructure stand-ins of tests/containers/compose.standins.yml.
# Prints the seconds each step took.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=localhost/ragkb-python-base:3.11
wheels="${RAGKB_WHEELHOUSE:-$HOME/.cache/ragkb/wheels}"
offline=(--build-arg PIP_INDEX_OPTS="--no-index --find-links /wheels" -v "$wheels:/wheels:ro")

step() {  # step NAME COMMAND...: run and print its duration
    local name=$1 start=$SECONDS; shift
    "$@"
    echo "built: $name in $((SECONDS - start)) s"
}

step podman bash scripts/containers/setup_podman.sh
step python-base bash scripts/containers/build_python_base.sh "$base"
mkdir -p "$wheels"
# resolved by the base image's own Python (markers such as python_full_version differ from the
# host's); also pip's build backend and the sdists' build requirements: the builds have no index
fill_wheelhouse='python -m venv /tmp/venv && cp -r /src /tmp/src && /tmp/venv/bin/pip download --quiet -d /wheels "torch>=2.2" /tmp/src \
    && /tmp/venv/bin/pip download --quiet --no-deps -d /wheels "unstructured-inference==1.6.14" \
       "setuptools>=69,<70" wheel "milvus==2.3.5"'
wheelhouse_key="$( { cat pyproject.toml; echo "$fill_wheelhouse"; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$wheels/.complete" 2>/dev/null)" != "$wheelhouse_key" ]; then
    step wheelhouse podman run --rm -v "$wheels:/wheels" -v "$PWD:/src:ro" "$base" sh -c "$fill_wheelhouse"
    echo "$wheelhouse_key" >"$wheels/.complete"
fi
step ragkb podman build -q --build-arg PYTHON_IMAGE="$base" "${offline[@]}" -t ragkb:latest .
# the stand-ins' context: their directory plus the Elasticsearch launcher the tests use
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp -r tests/containers/standins/. scripts/elasticsearch "$context/"
for standin in elasticsearch milvus debian-services; do
    step "standin-$standin" podman build -q --build-arg BASE_IMAGE="$base" "${offline[@]}" \
        -f "$context/$standin.Containerfile" -t "localhost/ragkb-standin-$standin:latest" "$context"
done
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'ragkb'
