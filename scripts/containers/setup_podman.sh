#!/usr/bin/env bash
# Make podman usable on a Debian build machine: install podman, runc and debootstrap if missing,
# and configure the engine. crun (podman's default runtime) refuses the hybrid cgroup layout of
# these machines and the default rlimits, so the engine runs runc with cgroupfs and fixed ulimits.
set -euo pipefail

missing=()
for tool in podman:podman runc:runc debootstrap:debootstrap; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
fi

conf=/etc/containers/containers.conf
if ! grep -qs '^runtime = "runc"' "$conf"; then
    mkdir -p /etc/containers
    [ -f "$conf" ] && cp "$conf" "$conf.before-ragkb"
    cat >"$conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
fi
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}}'
