"""docker-compose.yml under podman-compose, with the infrastructure stand-ins, for the container tests.

podman 4.3 (Debian bookworm) runs healthchecks only through systemd timers, and podman-compose
skips `condition: service_healthy` on podman < 4.6. So `wait_healthy` runs every container's
declared healthcheck (`podman healthcheck run`, the command compose declares) until all pass:
the stack is ready only when every healthcheck is green, as Docker Compose would wait for.
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "ragkbct"
COMPOSE = ["podman-compose", "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml"),
           "-f", str(ROOT / "tests" / "containers" / "compose.standins.yml")]


def run(command: list[str], *, timeout_s: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                           f"{result.stderr[-3000:]}")
    return result


def compose(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    return run([*COMPOSE, *args], timeout_s=timeout_s)


def up() -> None:
    """`up -d`, in the order the compose file's `depends_on` asks for and podman-compose enforces here: the
    one-shot `certs` job to completion, then every other service.

    podman-compose enforces `service_completed_successfully` by creating each dependent container with
    `--requires=certs`, which makes podman run the finished job once more before starting each of them,
    and waits for it to exit again every time: minutes of start-up on two cores, for nothing (its
    `service_healthy` conditions it skips on this podman, see `wait_healthy`)."""
    compose("up", "-d", "--no-deps", "certs")
    [certs] = containers("certs", running_only=False)
    exit_code = run(["podman", "wait", certs]).stdout.strip()
    if exit_code != "0":
        raise RuntimeError(f"certs exited with {exit_code}:\n{run(['podman', 'logs', certs], check=False).stderr[-3000:]}")
    services = [service for service in compose("config", "--services").stdout.split() if service != "certs"]
    compose("up", "-d", "--no-deps", *services)


def containers(service: str | None = None, *, running_only: bool = True) -> list[str]:
    """Names of the project's containers (of one service), sorted."""
    command = ["podman", "ps", "--filter", f"label=io.podman.compose.project={PROJECT}", "--format", "{{.Names}}"]
    if service:
        command += ["--filter", f"label=io.podman.compose.service={service}"]
    if not running_only:
        command.append("--all")
    return sorted(run(command).stdout.split())


def health(name: str) -> str:
    """'healthy' / 'unhealthy' / 'starting', or '' for a container without a healthcheck."""
    state = json.loads(run(["podman", "inspect", name]).stdout)[0]["State"]
    return (state.get("Health") or state.get("Healthcheck") or {}).get("Status", "")


def wait_healthy(timeout_s: float = 1200, poll_s: float = 3) -> dict[str, str]:
    """Run the running containers' healthchecks until every one passes; {container: status}.

    Each round checks, concurrently, the containers not yet seen healthy (the stack's start-up is what
    the 2 cores are busy with); once all have passed, one last round checks every container again, so
    the result is every healthcheck green at the same time."""
    deadline = time.monotonic() + timeout_s
    statuses: dict[str, str] = {}
    while True:
        names = containers()
        pending = [name for name in names if statuses.get(name) not in ("healthy", "no healthcheck")]
        statuses = {name: statuses[name] for name in names if name not in pending}
        with ThreadPoolExecutor(max_workers=max(1, len(pending))) as pool:
            statuses.update(zip(pending, pool.map(check_health, pending)))
        if all(status in ("healthy", "no healthcheck") for status in statuses.values()):
            with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
                final = dict(zip(names, pool.map(check_health, names)))
            if final == statuses:
                return final
            statuses = final
        if time.monotonic() > deadline:
            raise TimeoutError(f"not healthy after {timeout_s}s: {statuses}")
        time.sleep(poll_s)


def check_health(name: str) -> str:
    """Run the container's declared healthcheck once; its status afterwards (see `health`)."""
    if health(name) == "":
        return "no healthcheck"
    run(["podman", "healthcheck", "run", name], check=False, timeout_s=60)
    return health(name)


def exec_json(container: str, *command: str, timeout_s: float = 900) -> dict:
    """Run a command in a container; its stdout's last line parsed as JSON."""
    out = run(["podman", "exec", container, *command], timeout_s=timeout_s).stdout
    return json.loads(out.strip().splitlines()[-1])
