"""The image built from the unchanged Dockerfile, run as Kubernetes runs it: uid 10001 and a read-only
root filesystem (writable: a tmpfs on /tmp and the data volume). The embedded stack in one container
must report SERVING on gRPC health and ready on the gateway's REST /healthz."""

from __future__ import annotations

import json
import time

import pytest

from tests.containers.podman_stack import run

pytestmark = [pytest.mark.containers, pytest.mark.timeout(3600)]

NAME = "ragkbct-image"
PROBE_REST = ("import json, urllib.request; "
              "print(json.dumps(json.load(urllib.request.urlopen('http://127.0.0.1:8780/healthz', timeout=5))))")


@pytest.fixture(scope="module")
def container(images):
    run(["podman", "rm", "-f", NAME], check=False)
    run(["podman", "volume", "rm", "-f", f"{NAME}-data"], check=False)
    run(["podman", "run", "-d", "--name", NAME, "--read-only", "--user", "10001", "--tmpfs", "/tmp",
         "-v", f"{NAME}-data:/data", "-e", "RAGKB_HOST=127.0.0.1", "ragkb:latest", "python", "-m", "ragkb.embedded"])
    try:
        yield NAME
    finally:
        run(["podman", "rm", "-f", NAME], check=False)
        run(["podman", "volume", "rm", "-f", f"{NAME}-data"], check=False)


def wait_serving(container: str, timeout_s: float = 600) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        probe = run(["podman", "exec", container, "python", "scripts/grpc_health_check.py", "--addr", "127.0.0.1:50050"],
                    check=False)
        if probe.stdout.strip() == "SERVING" or time.monotonic() > deadline:
            return probe.stdout.strip() or probe.stderr.strip()
        time.sleep(3)


def test_embedded_stack_serves_as_uid_10001_on_a_read_only_root(container):
    assert wait_serving(container) == "SERVING", run(["podman", "logs", container], check=False).stderr[-3000:]
    health = json.loads(run(["podman", "exec", container, "python", "-c", PROBE_REST]).stdout)
    assert health["ready"] is True, health
    assert run(["podman", "exec", container, "id", "-u"]).stdout.strip() == "10001"
    for path in ("/app/x", "/opt/venv/x", "/x"):
        denied = run(["podman", "exec", container, "touch", path], check=False)
        assert denied.returncode != 0 and "Read-only file system" in denied.stderr, (path, denied.stderr)
    assert run(["podman", "exec", container, "touch", "/tmp/x", "/data/x"]).returncode == 0
