#!/usr/bin/env bash
# Build a stand-in for the official python:3.11-slim image from Debian packages, for machines
# that reach package registries but no container registry:
#   bash scripts/containers/build_python_base.sh [IMAGE_NAME]     (default ragkb-python-base:3.11)
# debootstrap (minbase, bookworm) + Debian's CPython 3.11 with venv and pip, laid out as the
# official image is: `python` and `pip` on PATH in /usr/local/bin. The host's extra CA
# certificates (/usr/local/share/ca-certificates) are trusted inside, so pip and apt reach the
# registries through the same egress as the host. Skipped when the image already exists.
set -euo pipefail
image="${1:-ragkb-python-base:3.11}"
if podman image exists "$image"; then
    echo "$image exists"; exit 0
fi
mirror="${DEBIAN_MIRROR:-$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian\b' /etc/apt/sources.list.d /etc/apt/sources.list 2>/dev/null \
    | head -n1 | awk '{print $2}' || true)}"
mirror="${mirror:-http://deb.debian.org/debian}"
root="$(mktemp -d /var/tmp/ragkb-python-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" "$mirror" >/dev/null
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
fi
ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
ln -sf /usr/bin/python3 "$root/usr/local/bin/python3"
ln -sf /usr/bin/pip3 "$root/usr/local/bin/pip"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' - "$image" >/dev/null
podman run --rm "$image" python -c 'import sys, venv, ensurepip; print("python", sys.version.split()[0])'
