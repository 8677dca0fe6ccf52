"""Gateway load: N concurrent REST clients on loopback against an embedded stack in its own process.

What it measures
  The embedded stack (every service, real Milvus Lite + SQLite FTS5 + MiniLM) runs as a
  child process (`python -m ragkb.embedded`) with the bundled English + Chinese samples
  ingested. Then, with the full query pipeline (retrieval, rerank, extractive answer,
  stored trace):
    1. baseline: 1 client for --seconds; QPS and latency p50/p95/p99;
    2. load: --clients concurrent clients for --seconds; the same numbers, and QPS and
       p50 as ratios of the baseline run;
    3. memory: the server's RSS (psutil) before and after --queries more queries at the
       same concurrency, and the difference.
  Errors (non-2xx answers, transport errors) are counted, never hidden.

Run from the repository root:
    python scripts/bench/gateway_load.py
    python scripts/bench/gateway_load.py --clients 8 --seconds 30 --queries 10000
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import psutil  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from ragkb.client import RagkbClient, iter_files  # noqa: E402

KB = "load"
QUESTIONS = [
    "How long does it take to charge the AMR-7 from 20% to 80%?",
    "How long is a Beacon pairing code valid?",
    "Which firmware version adds obstacle re-routing?",
    "AMR-7 的最大载重是多少？",
    "Beacon 的遥测数据保留多久？",
    "Beacon 接口每个密钥每分钟允许多少次请求？",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "RAGKB_DATA_DIR": str(data_dir), "RAGKB_LOG_LEVEL": "WARNING",
           "RAGKB_HTTP_PORT": str(free_port())}
    for name in ("parser", "indexer", "retriever", "reranker", "generator", "gateway_grpc"):
        env[f"RAGKB_{name.upper()}_ADDR"] = f"127.0.0.1:{free_port()}"
    log = open(data_dir.parent / "server.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "ragkb.embedded"], cwd=REPO_ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    state = data_dir / "embedded.json"
    deadline = time.monotonic() + 300
    while not state.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            sys.exit(f"the embedded stack did not start; see {log.name}")
        time.sleep(0.2)
    return process, json.loads(state.read_text())["endpoints"]["http"]


def run_clients(url: str, clients: int, *, seconds: float | None = None, total: int | None = None) -> dict:
    """`clients` threads, each with its own connection, until `seconds` pass or `total` queries are done."""
    latencies: list[float] = []
    errors: list[str] = []
    counter = itertools.count()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds if seconds else None

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while True:
                n = next(counter)
                if (total is not None and n >= total) or (stop_at is not None and time.monotonic() >= stop_at):
                    return
                body = {"query": QUESTIONS[n % len(QUESTIONS)], "namespaces": [], "top_k": 0}
                started = time.perf_counter()
                try:
                    response = http.post(f"/v1/knowledge-bases/{KB}/query", json=body)
                    failed = None if response.status_code == 200 else f"HTTP {response.status_code}"
                except httpx.HTTPError as error:
                    failed = type(error).__name__
                elapsed = time.perf_counter() - started
                with lock:
                    (errors.append(failed) if failed else latencies.append(elapsed))

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    ms = sorted(x * 1000 for x in latencies)
    pick = (lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]) if ms else (lambda q: float("nan"))
    return {"clients": clients, "queries": len(ms) + len(errors), "errors": len(errors),
            "error_kinds": sorted(set(errors)), "seconds": wall, "qps": len(ms) / wall,
            "p50": statistics.median(ms) if ms else float("nan"), "p95": pick(0.95), "p99": pick(0.99)}


def show(label: str, result: dict) -> None:
    print(f"{label:<22} clients={result['clients']:<3} queries={result['queries']:<6} errors={result['errors']:<4} "
          f"qps={result['qps']:7.1f}  p50={result['p50']:7.1f} ms  p95={result['p95']:7.1f} ms  "
          f"p99={result['p99']:7.1f} ms" + (f"  ({', '.join(result['error_kinds'])})" if result["errors"] else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the baseline and load runs")
    parser.add_argument("--queries", type=int, default=10_000, help="queries between the two RSS readings")
    args = parser.parse_args()
    if args.clients < 1 or args.seconds <= 0 or args.queries < 0:
        sys.exit("--clients must be >= 1, --seconds > 0 and --queries >= 0")

    with tempfile.TemporaryDirectory(prefix="ragkb-load-") as tmp:
        process, url = start_server(Path(tmp) / "data")
        try:
            server = psutil.Process(process.pid)
            client = RagkbClient(url)
            client.create_kb(KB)
            jobs = [client.upload(KB, name, path.read_bytes())["job_id"]
                    for path, name in iter_files(REPO_ROOT / "samples") if name != "README.md"]
            done = client.wait(jobs, timeout_s=600)
            print(f"server pid {process.pid} at {url}; {sum(j['state'] == 'done' for j in done)} sample documents "
                  f"ingested; {os.cpu_count()} CPUs")
            run_clients(url, args.clients, total=50)  # warm-up: models, caches, connection pools
            baseline = run_clients(url, 1, seconds=args.seconds)
            show("baseline (1 client)", baseline)
            load = run_clients(url, args.clients, seconds=args.seconds)
            show(f"load ({args.clients} clients)", load)
            print(f"ratios vs baseline: qps x{load['qps'] / baseline['qps']:.2f}, "
                  f"p50 x{load['p50'] / baseline['p50']:.2f}, p99 x{load['p99'] / baseline['p99']:.2f}")
            rss_before = server.memory_info().rss
            soak = run_clients(url, args.clients, total=args.queries)
            rss_after = server.memory_info().rss
            show(f"soak ({args.queries} queries)", soak)
            print(f"server RSS before {rss_before / 2**20:.1f} MiB, after {args.queries} queries "
                  f"{rss_after / 2**20:.1f} MiB, delta {(rss_after - rss_before) / 2**20:+.1f} MiB")
            client.close()
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    main()
