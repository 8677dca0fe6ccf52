"""docker-compose.yml run for real under podman: the image built from the unchanged Dockerfile, every
healthcheck green, the samples ingested and answered through the containerized gateway (REST and
gRPC), two retrievers and two workers, one of each killed under load.

Opt-in tier: `python -m pytest -m containers tests/containers` (root, podman; docs/deploy.md), run by
scripts/test.sh. The images are built once per session by scripts/containers/build_images.sh (cached:
a rebuild without changes takes seconds), see conftest.py.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from tests.containers.podman_stack import ROOT, compose, containers, exec_json, run, up, wait_healthy

pytestmark = [pytest.mark.containers, pytest.mark.timeout(3600)]

KB = "docs"
# samples/README.md: question -> a part of its answer and the document that holds it
QUESTIONS = {"How long does it take to charge the AMR-7 from 20% to 80%?": ("45 minutes", "amr7-user-guide"),
             "AMR-7 的最大载重是多少？": ("300公斤", "amr7-使用手册")}
# the compose KB (cluster mode offers only the server stores) with more, smaller chunks than the samples
# make: a job that is still embedding when its worker is killed
CRASH_CHUNKER = "chunker: {max_chars: 200, min_section_chars: 0, overlap_chars: 0}\n"


@pytest.fixture(scope="module")
def stack(images):
    compose("down", "-v", timeout_s=300)
    up()  # two retrievers and two workers: `scale` in compose.standins.yml
    try:
        statuses = wait_healthy()
        gateway = containers("gateway")[0]
        run(["podman", "cp", str(ROOT / "tests" / "containers" / "gateway_driver.py"), f"{gateway}:/tmp/"])
        run(["podman", "cp", str(ROOT / "samples"), f"{gateway}:/tmp/samples"])
        run(["podman", "cp", str(ROOT / "deploy" / "kb-examples" / "compose-kb.yaml"), f"{gateway}:/tmp/"])
        yield {"gateway": gateway, "health": statuses}
    finally:
        logs = ROOT / ".pytest_cache" / "containers-logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name in containers(running_only=False):
            output = run(["podman", "logs", name], check=False)
            (logs / f"{name}.log").write_text(output.stdout + output.stderr)
        compose("down", "-v", timeout_s=300)


def driver(stack, *args: str, timeout_s: float = 900) -> dict:
    return exec_json(stack["gateway"], "python", "/tmp/gateway_driver.py", *args, timeout_s=timeout_s)


def test_every_healthcheck_is_green_with_two_retrievers_and_two_workers(stack):
    health = stack["health"]
    for service in ("parser", "indexer", "reranker", "generator", "gateway", "elasticsearch", "milvus", "redis",
                    "etcd", "postgres"):
        assert [health[name] for name in containers(service)] == ["healthy"], service
    for service in ("retriever", "worker"):
        assert [health[name] for name in containers(service)] == ["healthy", "healthy"], service


def test_services_run_as_uid_10001_on_a_read_only_root(stack):
    for name in containers("retriever") + containers("gateway"):
        uid = run(["podman", "exec", name, "id", "-u"]).stdout.strip()
        write = run(["podman", "exec", name, "touch", "/app/x"], check=False)
        assert uid == "10001" and write.returncode != 0, (name, uid, write.stderr)


def test_samples_ingested_and_answered_with_citations_over_rest_and_grpc(stack):
    driver(stack, "create-kb", KB, "/tmp/compose-kb.yaml")
    ingested = driver(stack, "ingest", KB, "/tmp/samples/en", "/tmp/samples/zh")
    assert ingested["files"] and {job["state"] for job in ingested["jobs"].values()} == {"done"}, ingested
    for api in ("ask-rest", "ask-grpc"):
        for question, (expected, doc_id) in QUESTIONS.items():
            answer = driver(stack, api, KB, question)
            assert not answer["refused"] and expected in answer["answer"], (api, question, answer)
            assert doc_id in {c["doc_id"] for c in answer["citations"]}, (api, question, answer)


def test_a_retriever_killed_under_load_fails_no_query(stack):
    outcome = {}
    load = threading.Thread(target=lambda: outcome.update(driver(stack, "load", KB, "60", *QUESTIONS)))
    load.start()
    time.sleep(15)
    run(["podman", "kill", containers("retriever")[0]])
    load.join()
    assert outcome["queries"] > 0 and outcome["failures"] == [], outcome


def test_a_worker_killed_mid_ingest_finishes_the_job_exactly_once(stack):
    """One worker is paused, so the other takes the job; it is killed half-way through embedding, and the
    unacknowledged task comes back after the visibility timeout to a worker that finishes it once."""
    busy, spare = containers("worker")[:2]
    [indexer] = containers("indexer")
    gateway = stack["gateway"]
    run(["podman", "exec", gateway, "sh", "-c",
         f"cat /tmp/compose-kb.yaml > /tmp/crash-kb.yaml && printf '%s' '{CRASH_CHUNKER}' >> /tmp/crash-kb.yaml"])
    driver(stack, "create-kb", "crash", "/tmp/crash-kb.yaml")
    sections = "\n".join(["# Checks\n"] + [f"## Check {i}\n\nInspect wheel {i} and log reading {i}.\n"
                                         for i in range(300)])
    run(["podman", "exec", gateway, "sh", "-c", f"mkdir -p /tmp/crash && printf '%s' '{sections}' > /tmp/crash/manual.md"])
    run(["podman", "pause", spare])
    try:
        wait_until_not_consuming(spare)
        submit = subprocess.Popen(["podman", "exec", gateway, "python", "/tmp/gateway_driver.py", "ingest", "crash",
                                   "/tmp/crash"], stdout=subprocess.PIPE, text=True)
        job = driver(stack, "wait-embedding", "crash", "300")
        # the indexer is held still while the worker dies, so the job is half-embedded however fast the machine
        run(["podman", "pause", indexer])
        try:
            [held] = [j for j in driver(stack, "jobs", "crash")["jobs"] if j["job_id"] == job["job_id"]]
            assert held["state"] == "embedding" and held["chunks_done"] < held["chunks_total"], held
            run(["podman", "kill", busy])
        finally:
            run(["podman", "unpause", indexer])
    finally:
        run(["podman", "unpause", spare])
    out, _ = submit.communicate(timeout=900)
    final = json.loads(out.strip().splitlines()[-1])
    [finished] = final["jobs"].values()
    assert finished["state"] == "done" and finished["attempts"] >= 2, final
    listing = driver(stack, "documents", "crash")
    documents = listing["documents"]
    assert [d["doc_id"] for d in documents] == ["manual"]
    assert documents[0]["chunk_count"] == job["chunks_total"]
    assert int(listing["kb"]["chunk_count"]) == job["chunks_total"], listing["kb"]


def wait_until_not_consuming(worker: str, timeout_s: float = 30) -> None:
    """Until Redis holds no blocking pop of the (paused) worker's: Redis would hand the next task to a
    pending BRPOP, and a paused worker would sit on it. kombu's BRPOP lapses after a second, and a paused
    process does not issue the next one."""
    address = run(["podman", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                   worker]).stdout.strip()
    assert address, f"{worker} has no address"
    [redis] = containers("redis")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        clients = [dict(field.split("=", 1) for field in line.split())
                   for line in run(["podman", "exec", redis, "redis-cli", "client", "list"]).stdout.splitlines()]
        if not any(c["addr"].rsplit(":", 1)[0] == address and "b" in c["flags"] for c in clients):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{worker} ({address}) still has a blocking pop on Redis after {timeout_s} s")
