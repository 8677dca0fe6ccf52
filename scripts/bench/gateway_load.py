"""Gateway load: 1, 4, 8 and 16 concurrent REST clients on loopback against an embedded stack in its own process,
retrieval only and full answers, beside the bare embedding model's batched queries/s measured in the same run.

What it measures
  The embedded stack (every service, real Milvus Lite + SQLite FTS5 + MiniLM) runs as a
  child process (`python -m ragkb.embedded`) with the bundled English + Chinese samples
  ingested; the clients ask the samples' 32 golden questions (tests/golden/samples.jsonl) in turn.
    1. bare model: this process loads the same all-MiniLM-L6-v2 and encodes the questions with
       `model.encode(batch_size=32)` while the server is idle, with one and with two torch threads: the
       faster is the model's limit in queries/s, measured before every load run and after the last one
       (each run's ratio uses the mean of the measurements either side of it, so load from elsewhere
       shifts both alike);
    2. for each mode (`retrieval`: the rerank and generation steps turned off through the admin steps
       API, so a query is pre-retrieval + retrieval + its stored trace; `full`: the default steps,
       retrieval, rerank, extractive answer with its checks, stored trace), for each client count,
       --seconds of queries: QPS, latency p50/p95/p99, errors, the server's RSS before and after, the
       server's CPU time per query (what a query costs, however busy the machine is), and QPS as a ratio of
       the bare model's batched queries/s;
    3. soak: --queries more queries (--soak-mode, full answers by default) with 8 clients, the server's RSS
       before and after.
  --torch-threads sets the server's torch intra-op threads (OMP_NUM_THREADS; default: the embedder's,
  2 on 2 cores).
  Errors (non-2xx answers, transport errors) are counted, never hidden.

Run from the repository root:
    python scripts/bench/gateway_load.py
    python scripts/bench/gateway_load.py --seconds 30 --queries 10000 --clients 1,4,8,16
    python scripts/bench/gateway_load.py --torch-threads 1 --soak-mode retrieval
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
GOLDEN = REPO_ROOT / "tests" / "golden" / "samples.jsonl"
QUESTIONS = [json.loads(line)["query"] for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip()]
MODES = {  # mode -> the step settings it runs with (PUT /v1/admin/steps)
    "retrieval": {"rerank": {"enabled": False}, "generation": {"enabled": False}},
    "full": {},
}
SOAK_CLIENTS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(data_dir: Path, torch_threads: int = 0) -> tuple[subprocess.Popen, str]:
    """The embedded stack in a child process; `torch_threads` > 0 sets its OMP_NUM_THREADS (0: the embedder's
    own choice, 2 threads on 2 or more cores)."""
    env = {**os.environ, "RAGKB_DATA_DIR": str(data_dir), "RAGKB_LOG_LEVEL": "WARNING",
           "RAGKB_HTTP_PORT": str(free_port())}
    if torch_threads:
        env["OMP_NUM_THREADS"] = str(torch_threads)
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


class BareModel:
    """The server's embedding model loaded in this process; its batched queries/s is the faster of one and
    two torch threads (on a machine busy with other work two threads can be the slower)."""

    def __init__(self):
        from shared.embedders import SentenceTransformerEmbedder

        self._model = SentenceTransformerEmbedder("all-MiniLM-L6-v2")._model
        self.batched_qps()  # warm up

    def batched_qps(self, batches: int = 4) -> float:
        import torch

        texts = list(itertools.islice(itertools.cycle(QUESTIONS), 32 * batches))
        rates = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            started = time.perf_counter()
            self._model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
            rates.append(len(texts) / (time.perf_counter() - started))
        return max(rates)


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


def cpu_seconds(server: psutil.Process) -> float:
    times = server.cpu_times()
    return times.user + times.system


def measured(server: psutil.Process, run) -> dict:
    """`run()`'s result with the server's RSS (MiB) before and after it, and the server's CPU time per answered
    query (ms): what a query costs whatever else the machine runs, so 1000 × cores / cpu_ms bounds QPS."""
    before, cpu_before = server.memory_info().rss / 2**20, cpu_seconds(server)
    result = run()
    cpu_ms = (cpu_seconds(server) - cpu_before) * 1000 / max(1, result["queries"] - result["errors"])
    return {**result, "rss_before": before, "rss_after": server.memory_info().rss / 2**20, "cpu_ms": cpu_ms}


def row(mode: str, result: dict, bare_qps: float) -> str:
    kinds = f" ({', '.join(result['error_kinds'])})" if result["errors"] else ""
    return (f"| {mode} | {result['clients']} | {result['queries']} | {result['errors']}{kinds} | {result['qps']:.1f} "
            f"| {bare_qps:.1f} | {result['qps'] / bare_qps:.2f} "
            f"| {result['p50']:.0f} / {result['p95']:.0f} / {result['p99']:.0f} ms | {result['cpu_ms']:.1f} ms "
            f"| {result['rss_before']:.0f} → {result['rss_after']:.0f} MiB |")


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,4,8,16", help="comma-separated client counts")
    parser.add_argument("--modes", default="retrieval,full", help=f"comma-separated, of: {', '.join(MODES)}")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each (mode, clients) run")
    parser.add_argument("--queries", type=int, default=10_000,
                        help=f"queries with {SOAK_CLIENTS} clients between the two soak RSS readings")
    parser.add_argument("--soak-mode", default="full", choices=list(MODES), help="the steps the soak queries run")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="the server's torch intra-op threads (OMP_NUM_THREADS); 0 = the embedder's default")
    args = parser.parse_args()
    try:
        client_counts = [int(n) for n in args.clients.split(",")]
    except ValueError:
        sys.exit(f"--clients must be comma-separated integers, got {args.clients!r}")
    modes = args.modes.split(",")
    if any(n < 1 for n in client_counts) or args.seconds <= 0 or args.queries < 0 or not set(modes) <= set(MODES):
        sys.exit(f"--clients must be >= 1, --seconds > 0, --queries >= 0 and --modes among {', '.join(MODES)}")

    with tempfile.TemporaryDirectory(prefix="ragkb-load-") as tmp:
        process, url = start_server(Path(tmp) / "data", args.torch_threads)
        try:
            server = psutil.Process(process.pid)
            client = RagkbClient(url)
            client.create_kb(KB)
            jobs = [client.upload(KB, name, path.read_bytes())["job_id"]
                    for path, name in iter_files(REPO_ROOT / "samples") if name != "README.md"]
            done = client.wait(jobs, timeout_s=600)
            bare = BareModel()
            print(f"server pid {process.pid} at {url}; {sum(j['state'] == 'done' for j in done)} sample documents "
                  f"ingested; {os.cpu_count()} CPUs; load average {load_average()}")
            runs = []  # (mode, result, bare model q/s before the run)
            with httpx.Client(base_url=url, timeout=60) as admin:
                for mode in modes:
                    admin.put("/v1/admin/steps", json={"steps": MODES[mode]}).raise_for_status()
                    run_clients(url, max(client_counts), total=50)  # warm-up: caches, connection pools
                    for clients in client_counts:
                        bare_qps = bare.batched_qps()
                        result = measured(server, lambda: run_clients(url, clients, seconds=args.seconds))
                        runs.append((mode, result, bare_qps))
                        print(f"  {mode:<9} clients={clients:<3} qps={result['qps']:6.1f} p50={result['p50']:6.0f} ms "
                              f"cpu/query={result['cpu_ms']:5.1f} ms errors={result['errors']}  bare model {bare_qps:.1f} q/s  "
                              f"load average {load_average()}", flush=True)
                bare_last = bare.batched_qps()
                soak = None
                if args.queries:
                    admin.put("/v1/admin/steps", json={"steps": MODES[args.soak_mode]}).raise_for_status()
                    soak = measured(server, lambda: run_clients(url, SOAK_CLIENTS, total=args.queries))
            around = [(bare_qps + after) / 2 for (_, _, bare_qps), after
                      in zip(runs, [b for _, _, b in runs[1:]] + [bare_last])]
            print(f"bare model, batch 32: {min(b for *_, b in runs):.1f}-{max(b for *_, b in runs):.1f} q/s "
                  f"over the runs; load average {load_average()}")
            print("\n| mode | clients | queries | errors | QPS | bare batched q/s around the run | QPS / bare "
                  "| p50 / p95 / p99 | server CPU per query | server RSS |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for (mode, result, _), bare_qps in zip(runs, around):
                print(row(mode, result, bare_qps))
            if soak is not None:
                change = (soak["rss_after"] - soak["rss_before"]) / soak["rss_before"]
                print(f"\nsoak, {args.soak_mode}, {SOAK_CLIENTS} clients: {soak['queries']} queries, {soak['errors']} errors, "
                      f"{soak['qps']:.1f} QPS, p50 {soak['p50']:.0f} ms, p99 {soak['p99']:.0f} ms; server RSS "
                      f"{soak['rss_before']:.1f} → {soak['rss_after']:.1f} MiB ({change:+.1%}); "
                      f"load average {load_average()}")
            client.close()
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    main()
