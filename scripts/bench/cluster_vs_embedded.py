"""Cluster mode against embedded: query latency of the local stack and the embedded stack on one KB.

What it measures
  The same documents (the bundled English + Chinese samples; with --scifact N also the first N
  SciFact abstracts) go into two stacks running side by side:
    embedded  every service in this process: SQLite FTS5 and a Milvus Lite file;
    local     scripts/local_stack.py: every service its own process, mutual TLS between them,
              an Elasticsearch node and a Milvus server (its KB config, D/kb.yaml, with
              vector_store.search_consistency set by --search-consistency), PostgreSQL, Redis and
              one Celery worker.
  For each: start until every service is SERVING; create the KB; ingest over REST (wall time until
  every job is done: read-your-writes is paid here). Then each stack's first query (client-measured:
  what the first user after start waits, on services that said SERVING; its stages go to stderr),
  --warmup unmeasured queries, and --queries measured queries, one at a time and interleaved (one on
  each stack in turn, so a busy machine slows both alike), cycling the sample questions:
  client-measured p50/p95 and the p50 of each stage and retrieval route from the response.
  CPU per measured query: each local-stack process's (and its children's), counted over that stack's
  queries only; for the embedded stack, this process's CPU over its queries less the client's own
  (this process's CPU over the local stack's queries).
  Printed: one row per stack, the ratios local / embedded, and the CPU per query of each process.

Run from the repository root:
    python scripts/bench/cluster_vs_embedded.py
    python scripts/bench/cluster_vs_embedded.py --queries 60 --scifact 200
    python scripts/bench/cluster_vs_embedded.py --search-consistency Strong   # every search waits a time tick
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
import psutil

import _common as common
from ragkb.client import RagkbClient, iter_files

sys.path.insert(0, str(common.REPO_ROOT / "scripts"))
import local_stack  # noqa: E402

KB = "bench"
BENCH_PROCESS = "bench process"  # the client, and the embedded stack's services
SAMPLES = common.REPO_ROOT / "samples"
QUESTIONS = [
    "How long does it take to charge the AMR-7 from 20% to 80%?",
    "What is the maximum payload of the AMR-7?",
    "How long is a Beacon pairing code valid?",
    "Which firmware version adds obstacle re-routing?",
    "How do I reset a robot?",
    "AMR-7 的最大载重是多少？",
    "Beacon 的遥测数据保留多久？",
    "AMR-7 充电需要多长时间？",
    "Beacon 接口每个密钥每分钟允许多少次请求？",
    "如何重置机器人？",
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=30, help="measured queries per stack (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured queries after the first (default 3)")
    parser.add_argument("--scifact", type=int, default=0, metavar="N",
                        help="also ingest the first N SciFact abstracts (default 0: the samples only)")
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA,
                        help=f"SciFact folder in BEIR layout (default {common.DEFAULT_DATA})")
    parser.add_argument("--search-consistency", default="Bounded", choices=("Bounded", "Session", "Strong",
                                                                              "Eventually"),
                        help="the local stack KB's Milvus search consistency (default Bounded)")
    return parser.parse_args()


def documents(args: argparse.Namespace, folder: Path) -> list[tuple[str, bytes]]:
    """(file name, bytes) of every document both stacks ingest."""
    files = [(name, path.read_bytes()) for path, name in iter_files(SAMPLES) if name != "README.md"]
    if args.scifact:
        corpus = common.read_corpus(common.require_scifact(args.data))[:args.scifact]
        files += [(path.name, path.read_bytes()) for _, path in common.write_documents(corpus, folder)]
    return files


class Target:
    """One running stack under test: its REST client and what was measured on it."""

    def __init__(self, name: str, url: str, started: float, processes: dict[str, int]):
        self.name, self.client = name, RagkbClient(url, timeout_s=600)
        self.ready_s = time.perf_counter() - started
        self.row: dict = {"stack": name, "ready_s": self.ready_s}
        self.totals: list[float] = []
        self.parts: dict[str, list[float]] = defaultdict(list)
        self.processes = processes  # name -> pid of each other process whose CPU (with its children's) is counted
        self.cpu_s: dict[str, float] = defaultdict(float)  # name -> CPU seconds over the measured queries

    def ingest(self, config_yaml: str, files: list[tuple[str, bytes]]) -> None:
        self.client.create_kb(KB, config_yaml=config_yaml)
        began = time.perf_counter()
        jobs = self.client.wait([self.client.upload(KB, filename, content)["job_id"] for filename, content in files],
                                timeout_s=3600)
        self.row["ingest_s"] = time.perf_counter() - began
        common.report_failures(jobs)

    def first_query(self) -> None:
        """The first query this stack ever answers: its stages say what it still had to set up."""
        self.row["first_ms"], first = self.query(QUESTIONS[0])
        print(f"{self.name}: first query {self.row['first_ms']:.0f} ms; stages " + ", ".join(
            f"{stage} {report['ms']:.0f} ms" for stage, report in first["stages"].items()), file=sys.stderr)

    def query(self, question: str) -> tuple[float, dict]:
        started = time.perf_counter()
        result = self.client.query(KB, question)
        return (time.perf_counter() - started) * 1000, result

    def measured_query(self, question: str) -> None:
        before = self.cpu()
        own = time.process_time()  # right around the query: reading the other processes' CPU costs CPU too
        ms, result = self.query(question)
        self.cpu_s[BENCH_PROCESS] += time.process_time() - own
        for name, seconds in self.cpu().items():
            self.cpu_s[name] += seconds - before[name]
        self.totals.append(ms)
        for stage, report in result["stages"].items():
            self.parts[stage].append(report["ms"])
        for route, value in result["stages"].get("retrieval", {}).get("metadata", {}).items():
            if route in common.ROUTES:
                self.parts[route].append(float(value))

    def cpu(self) -> dict[str, float]:
        seconds = {}
        for name, pid in self.processes.items():
            try:
                seconds[name] = common.process_tree_cpu(pid)
            except psutil.NoSuchProcess:  # an engine that stopped: counted as idle
                seconds[name] = 0.0
        return seconds

    def summary(self) -> dict:
        self.client.close()
        p50, p95 = common.p50_p95(self.totals)
        queries = max(1, len(self.totals))
        return {**self.row, "p50": p50, "p95": p95,
                **{part: common.p50_p95(values)[0] for part, values in self.parts.items()},
                "cpu_ms": {name: seconds * 1000 / queries for name, seconds in self.cpu_s.items()}}


def run(args, files, root: Path) -> list[dict]:
    """Both stacks up and ingested, then each one's first query, then the measured queries interleaved (one on
    each stack in turn), so both see the same load from whatever else runs on the machine."""
    started = time.perf_counter()
    embedded = common.start_stack(root / "embedded")
    local = None
    try:
        targets = [Target("embedded", embedded.http_url, started, {})]
        targets[0].ingest("", files)
        print("starting the local stack (engines and one process per service) ...", file=sys.stderr)
        started = time.perf_counter()
        local = local_stack.LocalStack(root / "local").start()
        processes = {name: service.pid for name, service in local.services.items()}
        processes.update({name: engine.pid for name, engine in (
            ("elasticsearch", local.elasticsearch), ("milvus", local.milvus), ("postgres", local.postgres),
            ("redis", local.redis))})
        targets.append(Target(f"local ({args.search_consistency})", local.http_url, started, processes))
        targets[1].ingest(re.sub(r"search_consistency: \w+", f"search_consistency: {args.search_consistency}",
                                 local.kb_yaml_path.read_text(encoding="utf-8")), files)
        for target in targets:
            target.first_query()
        for n in range(args.warmup + args.queries):
            question = QUESTIONS[(n + 1) % len(QUESTIONS)]
            for target in targets:
                if n < args.warmup:
                    target.query(question)
                else:
                    target.measured_query(question)
        return [target.summary() for target in targets]
    finally:
        if local is not None:
            local.stop()
        embedded.stop()


def report(rows: list[dict]) -> None:
    columns = ["ready_s", "ingest_s", "first_ms", "p50", "p95", *common.STAGES, *common.ROUTES]
    print("| stack | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in rows:
        print(f"| {row['stack']} | " + " | ".join(f"{row.get(c, float('nan')):.1f}" for c in columns) + " |")
    embedded, local = rows
    print(f"\nlocal / embedded: p50 {local['p50'] / embedded['p50']:.2f}, p95 {local['p95'] / embedded['p95']:.2f}, "
          f"first query {local['first_ms'] / embedded['first_ms']:.2f}")
    client_ms = local["cpu_ms"].pop(BENCH_PROCESS)  # over the local stack's queries: the client alone
    embedded_ms = embedded["cpu_ms"][BENCH_PROCESS] - client_ms
    local_ms = sum(local["cpu_ms"].values())
    print(f"\nCPU ms per query: embedded {embedded_ms:.1f} (this process {embedded['cpu_ms'][BENCH_PROCESS]:.1f} "
          f"less the client's {client_ms:.1f}), local {local_ms:.1f}: "
          + ", ".join(f"{name} {ms:.1f}" for name, ms in sorted(local["cpu_ms"].items(), key=lambda kv: -kv[1])))


def main() -> None:
    args = parse_args()
    with common.temp_root() as tmp:
        root = Path(tmp)
        files = documents(args, root / "docs")
        try:
            rows = run(args, files, root)
        except httpx.HTTPError as error:
            sys.exit(f"benchmark failed: {error}")
    report(rows)


if __name__ == "__main__":
    main()
