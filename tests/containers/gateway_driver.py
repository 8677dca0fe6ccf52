"""Client commands run inside the gateway container (copied to /tmp there), against its loopback.

The gateway answers key-less clients on loopback only, so the container test drives it from inside
its own container, over both of its APIs. Each command prints one JSON object:

    python gateway_driver.py create-kb NAME CONFIG_YAML
    python gateway_driver.py ingest KB DIR...          # uploads every file, waits for the jobs
    python gateway_driver.py ask-rest KB QUESTION
    python gateway_driver.py ask-grpc KB QUESTION
    python gateway_driver.py load KB SECONDS QUESTION... # queries in a loop; counts failures
    python gateway_driver.py documents KB
    python gateway_driver.py jobs KB
    python gateway_driver.py wait-embedding KB SECONDS  # the first job seen half-way through embedding
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import grpc

from ragkb.client import RagkbClient, RagkbApiError
from shared.contracts import gateway_pb2, gateway_pb2_grpc

REST = "http://127.0.0.1:8780"
GRPC = "127.0.0.1:50050"


def create_kb(name: str, config_path: str) -> dict:
    return RagkbClient(REST).create_kb(name, config_yaml=Path(config_path).read_text())


def ingest(kb: str, *folders: str) -> dict:
    client = RagkbClient(REST, timeout_s=600)
    files = sorted(p for folder in folders for p in Path(folder).rglob("*") if p.is_file() and p.name != "README.md")
    job_ids = [client.upload(kb, f.name, f.read_bytes(), doc_id=f.stem)["job_id"] for f in files]
    finished = client.wait(job_ids)
    return {"files": [f.name for f in files],
            "jobs": {job["job_id"]: {key: job.get(key) for key in ("doc_id", "state", "attempts", "error", "chunks_total")}
                     for job in finished}}


def ask_rest(kb: str, question: str) -> dict:
    answer = RagkbClient(REST).query(kb, question)
    return {"answer": answer["answer"], "citations": answer["citations"], "refused": answer.get("refused", False)}


def ask_grpc(kb: str, question: str) -> dict:
    with grpc.insecure_channel(GRPC) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Query(
            gateway_pb2.QueryRequest(kb=kb, query=question), timeout=60)
    return {"answer": response.answer, "refused": response.refused,
            "citations": [{"number": c.number, "doc_id": c.doc_id, "chunk_id": c.chunk_id} for c in response.citations]}


def load(kb: str, seconds: str, *questions: str) -> dict:
    client = RagkbClient(REST, timeout_s=60)
    done, failures = 0, []
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            client.query(kb, questions[done % len(questions)])
        except (RagkbApiError, OSError) as error:
            failures.append(f"{type(error).__name__}: {error}")
        done += 1
    return {"queries": done, "failures": failures}


def jobs(kb: str) -> dict:
    return {"jobs": RagkbClient(REST).list_jobs(kb)}


def wait_embedding(kb: str, seconds: str) -> dict:
    """Poll the KB's jobs every 20 ms (one process, one connection: a job of a few hundred chunks embeds in
    seconds) until one has written some but not all of its chunks."""
    client = RagkbClient(REST, timeout_s=60)
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        for job in client.list_jobs(kb):
            if job["state"] == "embedding" and 0 < job["chunks_done"] < job["chunks_total"]:
                return job
        time.sleep(0.02)
    raise TimeoutError(f"no job of {kb} was half-way through embedding within {seconds} s")


def documents(kb: str) -> dict:
    return {"documents": RagkbClient(REST).list_documents(kb), "kb": RagkbClient(REST).get_kb(kb)}


COMMANDS = {"create-kb": create_kb, "ingest": ingest, "ask-rest": ask_rest, "ask-grpc": ask_grpc,
            "load": load, "documents": documents, "jobs": jobs, "wait-embedding": wait_embedding}

if __name__ == "__main__":
    print(json.dumps(COMMANDS[sys.argv[1]](*sys.argv[2:]), ensure_ascii=False))
