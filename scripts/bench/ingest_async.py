"""Asynchronous ingestion throughput: Celery workers on Redis, 1 vs 2 workers, vs bare embedding.

What it measures
  A real `redis-server` (free port, nothing persisted) and an embedded stack whose gateway
  publishes jobs to it run in this process; workers are `python -m services.worker.main`
  subprocesses (one job at a time each) pointed at the stack's parser and indexer.
  1. For 1 and then 2 worker processes, the first N SciFact documents (.txt files) are
     uploaded over REST to a fresh knowledge base; wall time runs from the first upload
     until every job is final, giving documents/s.
  2. Baseline, same process: the stack's own embedder (same model object, same batch
     size) embeds the chunk texts the pipeline indexed, in one call; documents/s = N /
     that time.
  The ratio pipeline docs/s / bare docs/s is the share of the model's raw speed the async
  pipeline delivers. Embedding runs in the one indexer, so a second worker overlaps
  parsing, gRPC and job bookkeeping with it rather than adding embedding capacity.

Run from the repository root (needs redis-server; data in ../shared/data/scifact):
    python scripts/bench/ingest_async.py --docs 100
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import _common as common
from ragkb.embedded import EmbeddedStack
from services.parser.parser import parse_document
from shared import components
from shared.config import DEFAULT_NAMESPACE, Settings
from shared.kb import KnowledgeBaseCatalog


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100, help="first N corpus documents (default 100)")
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA,
                        help=f"SciFact folder in BEIR layout (default {common.DEFAULT_DATA})")
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(directory: Path) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server") or sys.exit("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    process = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly",
                                "no", "--dir", str(directory)], stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.1)
    process.kill()
    sys.exit("redis-server did not start")


def start_worker(settings: Settings, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGKB_")}
    env.update(RAGKB_DATA_DIR=str(settings.data_dir), RAGKB_PARSER_ADDR=settings.parser_addr,
               RAGKB_INDEXER_ADDR=settings.indexer_addr, RAGKB_BROKER_URL=settings.broker_url,
               RAGKB_WORKER_ADDR="127.0.0.1:0", RAGKB_INGEST_WORKERS="1", RAGKB_LOG_LEVEL="WARNING",
               RAGKB_INGEST_NAMESPACE_SLOTS=str(settings.ingest_namespace_slots),
               PYTHONPATH=str(common.REPO_ROOT))
    with open(log, "ab") as handle:
        return subprocess.Popen([sys.executable, "-m", "services.worker.main"], cwd=common.REPO_ROOT, env=env,
                                stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run(stack: EmbeddedStack, http: httpx.Client, files, workers: int, root: Path) -> float:
    kb = f"async{workers}"
    common.create_kb(http, kb)
    processes = [start_worker(stack.settings, root / f"worker-{workers}-{i}.log") for i in range(workers)]
    try:
        jobs, seconds = common.ingest(http, kb, files)
    finally:
        for process in processes:
            stop(process)
    common.report_failures(jobs)
    return sum(job["state"] == "done" for job in jobs) / seconds


def bare_docs_per_s(stack: EmbeddedStack, files) -> float:
    config = KnowledgeBaseCatalog.for_settings(stack.settings).get("async1")
    texts = [chunk.content for doc_id, path in files
             for chunk in parse_document(kb=config.name, namespace=DEFAULT_NAMESPACE, filename=path.name,
                                         data=path.read_bytes(), doc_id=doc_id, chunker=config.chunker).chunks]
    embedder = components.embedder_for(config)
    started = time.perf_counter()
    embedder.embed_documents(texts)
    return len(files) / (time.perf_counter() - started)


def main() -> None:
    args = parse_args()
    docs = common.read_corpus(common.require_scifact(args.data))[:args.docs]
    with common.temp_root() as tmp:
        root = Path(tmp)
        files = common.write_documents(docs, root / "docs")
        redis, url = start_redis(root)
        stack = None
        try:
            print("starting embedded stack (loads the embedding model) ...", file=sys.stderr)
            stack = EmbeddedStack(Settings(data_dir=root / "data", broker_url=url), ephemeral_ports=True).start()
            with httpx.Client(base_url=stack.http_url, timeout=120) as http:
                one = run(stack, http, files, 1, root)
                two = run(stack, http, files, 2, root)
            bare = bare_docs_per_s(stack, files)
        finally:
            if stack is not None:
                stack.stop()
            redis.terminate()
            redis.wait()
    common.print_table(f"async ingestion, {len(files)} SciFact documents", [
        ("1 worker docs/s", f"{one:.2f}"),
        ("2 workers docs/s", f"{two:.2f}"),
        ("bare embedding docs/s", f"{bare:.2f}"),
        ("1 worker / bare", f"{one / bare:.2f}"),
        ("2 workers / bare", f"{two / bare:.2f}"),
        ("2 workers / 1 worker", f"{two / one:.2f}"),
    ])
    print(common.machine_line())


if __name__ == "__main__":
    main()
