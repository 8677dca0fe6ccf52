"""Shared helpers of the benchmark scripts: SciFact corpus -> .txt files -> a KB in an embedded stack.

Not a script of its own. The scripts next to it import `_setup` first (thread environment,
repository root on sys.path) and then this module.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import numpy as np
import psutil
from tqdm import tqdm

from ragkb.embedded import EmbeddedStack
from shared.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact"
FINAL_STATES = {"done", "failed", "cancelled"}
STAGES = ("pre-retrieval", "retrieval", "post-retrieval", "generation")  # a query response's `stages`
ROUTES = ("bm25_ms", "dense_ms", "fusion_ms")  # in the retrieval stage's metadata


def require_scifact(data: Path, *, need_qrels: bool = False) -> Path:
    """Exit with a clear message when the SciFact folder (BEIR layout) is not there."""
    needed = [data / "corpus.jsonl"] + ([data / "queries.jsonl", data / "qrels" / "test.tsv"] if need_qrels else [])
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        sys.exit(f"SciFact data not found: missing {', '.join(missing)}.\n"
                 f"Expected the BEIR SciFact folder at {data} (see ../shared/data/README.md) or pass --data DIR.")
    return data


def read_corpus(data: Path) -> list[dict]:
    """All corpus records in file order: {_id, title, text}."""
    with open(data / "corpus.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_documents(docs: list[dict], folder: Path) -> list[tuple[str, Path]]:
    """One UTF-8 .txt per document: title, blank line, text. Returns (doc_id, path) pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for doc in docs:
        path = folder / f"{doc['_id']}.txt"
        path.write_text(f"{doc.get('title', '').strip()}\n\n{doc.get('text', '').strip()}\n", encoding="utf-8")
        written.append((doc["_id"], path))
    return written


def start_stack(root: Path) -> EmbeddedStack:
    """Every service in this process, data under `root`, all ports ephemeral."""
    print("starting embedded stack (loads the embedding model) ...", file=sys.stderr)
    return EmbeddedStack(Settings(data_dir=root / "data"), ephemeral_ports=True).start()


def process_tree_cpu(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by a process (default: this one) and its live descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def temp_root() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="ragkb-bench-")


def create_kb(client: httpx.Client, name: str, config_yaml: str = "") -> None:
    response = client.post("/v1/knowledge-bases", json={"name": name, "config_yaml": config_yaml})
    if response.status_code != 201:
        sys.exit(f"creating knowledge base {name!r} failed: HTTP {response.status_code} {response.text}")


def ingest(client: httpx.Client, kb: str, files: list[tuple[str, Path]], *,
           poll_s: float = 0.2) -> tuple[list[dict], float]:
    """Upload every file over REST, then wait until every job is final.

    Returns the final job JSONs and the client-measured wall time from the first upload
    to the moment the last job was seen final. Polling follows the queue order, one job at
    a time, so the benchmark adds about one cheap request per `poll_s` to the load.
    """
    started = time.perf_counter()
    job_ids = []
    for doc_id, path in tqdm(files, desc="upload", unit="doc", file=sys.stderr):
        with open(path, "rb") as handle:
            response = client.post(f"/v1/knowledge-bases/{kb}/documents",
                                   files={"file": (path.name, handle, "text/plain")}, data={"doc_id": doc_id})
        if response.status_code != 202:
            sys.exit(f"upload of {path.name} failed: HTTP {response.status_code} {response.text}")
        job_ids.append(response.json()["job_id"])
    finished = []
    with tqdm(total=len(job_ids), desc="jobs", unit="job", file=sys.stderr) as bar:
        for job_id in job_ids:
            while True:
                job = client.get(f"/v1/jobs/{job_id}").json()
                if job["state"] in FINAL_STATES:
                    break
                time.sleep(poll_s)
            finished.append(job)
            bar.update(1)
    return finished, time.perf_counter() - started


def job_seconds(job: dict) -> float:
    """created_at -> updated_at of a job (queue wait + parse + index)."""
    return (datetime.fromisoformat(job["updated_at"]) - datetime.fromisoformat(job["created_at"])).total_seconds()


def report_failures(jobs: list[dict]) -> None:
    failed = [j for j in jobs if j["state"] != "done"]
    for job in failed[:5]:
        print(f"job {job['job_id']} ({job['filename']}) {job['state']}: {job['error']}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(jobs)} jobs did not finish 'done'", file=sys.stderr)


def p50_p95(values) -> tuple[float, float]:
    if len(values) == 0:
        return float("nan"), float("nan")
    p50, p95 = np.percentile(np.asarray(values, dtype=float), [50, 95])
    return float(p50), float(p95)


def machine_line() -> str:
    """CPU count, thread settings and load average: numbers from a busy shared machine need it."""
    import torch

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"cpus {os.cpu_count()}, torch threads {torch.get_num_threads()}, "
            f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, load avg (1/5/15 min) {load}")


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print(title)
    print("-" * len(title))
    for name, value in rows:
        print(f"{name:<{width}}  {value:>12}")
