"""The local multi-process stack: every service its own process on loopback, real engines under it.

    python scripts/local_stack.py up --dir D [--workers N] [--replicas retriever=3,indexer=2,gateway=2]
                                                             # start, print where each listens, return when ready
    python scripts/local_stack.py up --dir D --foreground    # the same, then run until Ctrl-C
    python scripts/local_stack.py down --dir D               # stop what `up` started in D

Starts PostgreSQL (the control-plane database, as in a cluster), Redis (the Celery broker), an
Elasticsearch node and a Milvus server (scripts/engines.py), then parser, indexer, retriever,
reranker, generator, the gateway (REST + gRPC) and N Celery workers, each as
`python -m services.<name>.main` with its RAGKB_* settings in the environment. It returns once
every service reports SERVING on gRPC health and the gateway's /healthz is ready. The KB catalog,
document registry, jobs and uploads, traces and API keys are in PostgreSQL (RAGKB_DATABASE_URL);
D/data holds the operator's profiles.yaml only; logs go to D/logs.

The indexer and the retriever are separate processes, so a knowledge base here must keep its
chunks in the Elasticsearch node and the Milvus server (a Milvus Lite file admits one process and
SQLite FTS5 is not shared with the search side): `up` writes that KB config to D/kb.yaml, for
`ragkb kb create NAME --config D/kb.yaml`.

As a module: `LocalStack(directory, workers=1, replicas={"retriever": 3}).start()` -> `.settings`, `.http_url`, `.kb_yaml_path`,
`.services` (name -> process with `.address` and `.pid`), `.describe()`, `.stop()`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

import engines  # noqa: E402
from grpc_health_check import check  # noqa: E402

from shared.config import KBConfig, Settings  # noqa: E402
from shared.stores import elasticsearch as elasticsearch_store  # noqa: E402
from shared.tls import CALLERS, init_certs  # noqa: E402

LAYERS = ("parser", "indexer", "retriever", "reranker", "generator")
SCALABLE = ("gateway", *LAYERS)  # the workers are scaled with `workers`
# torch intra-op threads per layer, where the default (2) does not suit a host whose cores every process shares:
# the retriever embeds a query while its BM25 search runs in Elasticsearch, and a two-thread team would wait
# for a core at every operator (README, Performance)
MODEL_THREADS = {"retriever": "1"}
STATE_FILE = "stack.json"
KB_FILE = "kb.yaml"


class StackError(RuntimeError):
    """A part of the local stack did not start or stop."""


class ServiceProcess:
    """One `python -m <module>` in its own process group (its parse workers go down with it)."""

    def __init__(self, name: str, module: str, env: dict[str, str], address: str, log_path: Path):
        self.name, self.module, self.address, self.log_path = name, module, address, log_path
        # inner services serve mTLS: their health check presents the service's own certificate
        # (a replica has its service's identity: `retriever-2` is a `retriever`)
        service = module.split(".")[1]
        self._tls = (env["RAGKB_TLS_DIR"], service) if service in CALLERS else ("", "")
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_serving(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise StackError(f"{self.name} exited with {self.process.returncode}; last log lines:\n"
                                 f"{engines.log_tail(self.log_path, 30)}")
            if check(self.address, timeout_s=2, tls_dir=self._tls[0], identity=self._tls[1]) == "SERVING":
                return
            time.sleep(0.3)
        raise StackError(f"{self.name} on {self.address} not SERVING in time; see {self.log_path}")

    def terminate(self) -> None:
        """SIGTERM: each service flips health to NOT_SERVING, drains and closes its stores."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)

    def wait_stopped(self, grace_s: float) -> None:
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        # a parse worker outliving its parent still belongs to the group
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kb_yaml() -> str:
    text = f"""# Knowledge bases of the local stack: BM25 in its Elasticsearch node, vectors in its Milvus server
# (the indexer and the retriever are separate processes and both must reach the chunks).
#   ragkb kb create NAME --config {KB_FILE}
keyword_store:
  name: elasticsearch
vector_store:
  name: milvus
  # recall@10 against exact search >= 0.95 where AUTOINDEX is not (docs/deploy.md, Knowledge-base size)
  index_type: HNSW
  index_params: {{M: 16, efConstruction: 128}}
  search_params: {{ef: 128}}
  # the retriever searches what the indexer (another process) wrote: the indexer finishes a job only
  # once searches at this level see its chunks, so no search has to wait for Strong's time tick
  search_consistency: Bounded
"""
    KBConfig.from_yaml(text, name="check")  # the file must stay a valid KB config
    return text


def check_replicas(replicas: dict[str, int]) -> dict[str, int]:
    """Replica counts of the scalable services; any service not named runs once."""
    unknown = sorted(set(replicas) - set(SCALABLE))
    if unknown:
        raise ValueError(f"replicas of {', '.join(unknown)}: only {', '.join(SCALABLE)} can be scaled here")
    for name, count in replicas.items():
        if count < 1:
            raise ValueError(f"replicas of {name}: {count} must be >= 1")
    return {name: replicas.get(name, 1) for name in SCALABLE}


def replica_names(service: str, count: int) -> list[str]:
    """`retriever`, `retriever-2`, `retriever-3`: the first replica keeps the service's name."""
    return [service, *(f"{service}-{n}" for n in range(2, count + 1))]


class LocalStack:
    """Start and stop the whole stack under `directory`; `workers` Celery worker processes and
    `replicas` of the gateway and the inner services (each replica its own process and port; the callers
    of a service balance over all its replicas, as they do over a Kubernetes Service)."""

    def __init__(self, directory: Path | str, *, workers: int = 1, replicas: dict[str, int] | None = None,
                 overrides: dict[str, object] | None = None, grace_s: float = 20.0):
        if workers < 1:
            raise ValueError(f"workers={workers} must be >= 1")
        if grace_s <= 0:
            raise ValueError(f"grace_s={grace_s} must be > 0")
        self.directory = Path(directory).resolve()
        self.workers = workers
        self.replicas = check_replicas(replicas or {})
        self.overrides = dict(overrides or {})  # further Settings of every service, e.g. ingest_step_timeout_s
        self.grace_s = grace_s
        self.logs = self.directory / "logs"
        self.kb_yaml_path = self.directory / KB_FILE
        self.services: dict[str, ServiceProcess] = {}
        self.postgres: engines.PostgresServer | None = None
        self.redis: engines.RedisServer | None = None
        self.elasticsearch: engines.ElasticsearchNode | None = None
        self.milvus: engines.MilvusServer | None = None
        self.settings: Settings | None = None
        self._extra_gateway_urls: list[str] = []

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.http_port}"

    @property
    def http_urls(self) -> list[str]:
        """The REST address of every gateway replica, the first one first."""
        return [self.http_url, *self._extra_gateway_urls]

    def start(self, timeout_s: float = 300) -> LocalStack:
        self.logs.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        try:
            self.postgres = engines.start_postgres()
            self.redis = engines.start_redis(self.directory / "redis")
            self.elasticsearch = engines.ElasticsearchNode(self.directory / "elasticsearch")
            self.milvus = engines.MilvusServer(self.directory / "milvus")
            with ThreadPoolExecutor(2, thread_name_prefix="engine") as pool:
                # the engines warm up while the services start: no service touches them before a KB exists
                started = [pool.submit(self._start_elasticsearch), pool.submit(self.milvus.start)]
                self._start_services()
                for future in started:
                    future.result()
            for service in self.services.values():
                service.wait_serving(deadline)
            self._wait_gateway_ready(deadline)
            self.kb_yaml_path.write_text(kb_yaml(), encoding="utf-8")
        except BaseException:
            self.stop()  # never leave half a stack behind
            raise
        return self

    def _start_elasticsearch(self) -> None:
        """Start the node and warm its search path (a fresh JVM runs it slowly for its first few hundred
        searches), both while the services start."""
        self.elasticsearch.start()
        elasticsearch_store.warm_up([self.elasticsearch.url])

    def _start_services(self) -> None:
        port = engines.free_port
        tls_dir = self.directory / "tls"
        init_certs(tls_dir, force=True)  # a development CA: every inner call of the stack is mutual TLS
        addresses = {name: [f"127.0.0.1:{port()}" for _ in range(self.replicas.get(name, 1))] for name in LAYERS}
        # callers dial every replica of a layer (an `ipv4:` replica list, balanced round robin)
        self.settings = Settings(
            data_dir=self.directory / "data", host="127.0.0.1", tls_dir=str(tls_dir),
            **{f"{name}_addr": ",".join(addresses[name]) for name in LAYERS},
            gateway_grpc_addr=f"127.0.0.1:{port()}", http_port=port(), broker_url=self.redis.url,
            database_url=self.postgres.dsn, **self.overrides)
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        # the operator's side: where the engines are; knowledge bases only choose the profile by name
        (self.settings.data_dir / "profiles.yaml").write_text(
            f"keyword_store: {{default: {{hosts: ['{self.elasticsearch.url}']}}}}\n"
            f"vector_store: {{default: {{uri: '{self.milvus.uri}'}}}}\n", encoding="utf-8")
        for layer in LAYERS:
            for name, address in zip(replica_names(layer, len(addresses[layer])), addresses[layer]):
                # a replica listens on its own address and calls the other layers' full replica lists
                self._spawn(name, f"services.{layer}.main", replace(self.settings, **{f"{layer}_addr": address}),
                            address)
        self._spawn("gateway", "services.gateway.main", self.settings, self.settings.gateway_grpc_addr)
        for name in replica_names("gateway", self.replicas["gateway"])[1:]:
            settings = replace(self.settings, gateway_grpc_addr=f"127.0.0.1:{port()}", http_port=port())
            self._spawn(name, "services.gateway.main", settings, settings.gateway_grpc_addr)
            self._extra_gateway_urls.append(f"http://127.0.0.1:{settings.http_port}")
        for n in range(1, self.workers + 1):
            settings = replace(self.settings, worker_addr=f"127.0.0.1:{port()}")
            self._spawn(f"worker-{n}", "services.worker.main", settings, settings.worker_addr)

    def _spawn(self, name: str, module: str, settings: Settings, address: str) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("RAGKB_")}
        env.update({f"RAGKB_{key.upper()}": str(value) for key, value in asdict(settings).items()})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        layer = module.split(".")[1]
        if layer in MODEL_THREADS and "OMP_NUM_THREADS" not in os.environ:  # an operator's own setting is kept
            env["OMP_NUM_THREADS"] = MODEL_THREADS[layer]
        self.services[name] = ServiceProcess(name, module, env, address, self.logs / f"{name}.log")

    def _wait_gateway_ready(self, deadline: float) -> None:
        for url in self.http_urls:
            body: object = None
            while time.monotonic() < deadline:
                try:
                    response = httpx.get(f"{url}/healthz", timeout=5)
                    body = response.json()
                    if response.status_code == 200 and body.get("ready"):
                        break
                except (httpx.HTTPError, ValueError) as error:
                    body = repr(error)
                time.sleep(0.3)
            else:
                raise StackError(f"gateway {url}/healthz not ready in time: {body}")

    def stop(self) -> None:
        """Clients first (gateway, workers), then the layers, then the engines; SIGKILL after the grace period."""
        callers = [n for n in self.services if n.startswith(("gateway", "worker-"))]
        for group in (callers, [n for n in self.services if n not in callers]):
            running = [self.services[name] for name in group if name in self.services]
            for service in running:
                service.terminate()
            for service in running:
                service.wait_stopped(self.grace_s)
        self.services.clear()
        for engine in (self.milvus, self.elasticsearch, self.redis, self.postgres):
            if engine is not None:
                engine.stop()

    def describe(self) -> str:
        """Where each part listens, and the KB config to create knowledge bases with."""
        lines = [f"{'postgres':<14} {self.postgres.dsn}", f"{'redis':<14} {self.redis.url}",
                 f"{'elasticsearch':<14} {self.elasticsearch.url}",
                 f"{'milvus':<14} {self.milvus.uri}"]
        for name, service in self.services.items():
            url = dict(zip(replica_names("gateway", len(self.http_urls)), self.http_urls)).get(name)
            extra = f", REST {url} (OpenAPI {url}/docs)" if url else ""
            kind = "gRPC health" if name.startswith("worker-") else "gRPC"
            lines.append(f"{name:<14} {kind} {service.address}{extra}  (pid {service.pid}, log {service.log_path})")
        lines += [f"data           {self.settings.data_dir}", "",
                  f"knowledge base config {self.kb_yaml_path}:", self.kb_yaml_path.read_text(encoding="utf-8"),
                  f"export RAGKB_URL={self.http_url}   # or pass --url to ragkb"]
        return "\n".join(lines)

    def state(self) -> dict:
        return {"pid": os.getpid(), "http": self.http_url, "kb_yaml": str(self.kb_yaml_path),
                "describe": self.describe(),
                "services": {name: {"address": s.address, "pid": s.pid} for name, s in self.services.items()},
                "engine_pids": [e.pid for e in (self.postgres, self.redis, self.elasticsearch, self.milvus)
                                if e and e.pid]}


# ---------------------------------------------------------------- CLI


class _Stop(Exception):
    """SIGTERM or SIGINT arrived."""


def _raise_stop(*_) -> None:
    raise _Stop


def _serve(directory: Path, workers: int, replicas: dict[str, int], timeout_s: float, *, announce: bool) -> int:
    """Start the stack, write its state file, run until SIGTERM/SIGINT, stop it."""
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    state_file = directory / STATE_FILE
    stack = LocalStack(directory, workers=workers, replicas=replicas)
    try:
        stack.start(timeout_s)
        state_file.write_text(json.dumps(stack.state()))
        if announce:
            print(f"{stack.describe()}\nlocal stack is up; Ctrl-C stops it", flush=True)
        while True:
            time.sleep(1)
    except _Stop:
        return 0
    finally:
        # a second signal must not interrupt the stop
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stack.stop()
        state_file.unlink(missing_ok=True)
        if announce:
            print("local stack stopped", flush=True)


def _up(directory: Path, workers: int, replicas: dict[str, int], timeout_s: float) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    state_file = directory / STATE_FILE
    if state_file.exists() and _alive(json.loads(state_file.read_text())["pid"]):
        print(f"a local stack is already running from {directory}; `down --dir {directory}` first", file=sys.stderr)
        return 1
    state_file.unlink(missing_ok=True)
    log_path = directory / "stack.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, __file__, "serve", "--dir", str(directory), "--workers", str(workers),
             "--replicas", ",".join(f"{name}={count}" for name, count in replicas.items()),
             "--timeout", str(timeout_s)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        while not state_file.exists():
            if process.poll() is not None:
                print(f"the local stack failed to start:\n{engines.log_tail(log_path, 40)}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        process.terminate()  # the serve process stops whatever it had started
        process.wait()
        print("start cancelled; everything stopped", file=sys.stderr)
        return 130
    state = json.loads(state_file.read_text())
    print(f"{state['describe']}\nlocal stack is up (pid {state['pid']}); stop it with: "
          f"python scripts/local_stack.py down --dir {directory}")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _down(directory: Path, timeout_s: float) -> int:
    state_file = directory / STATE_FILE
    if not state_file.exists():
        print(f"no local stack running from {directory}")
        return 0
    state = json.loads(state_file.read_text())
    pid = state["pid"]
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.3)
    if _alive(pid):
        # the stack process hung: kill it and everything it had started
        for child in [pid, *[s["pid"] for s in state["services"].values()], *state["engine_pids"]]:
            try:
                os.killpg(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        state_file.unlink(missing_ok=True)
        print(f"local stack (pid {pid}) did not stop within {timeout_s}s and was killed", file=sys.stderr)
        return 1
    print(f"local stack stopped (pid {pid})")
    return 0


def _replica_counts(text: str) -> dict[str, int]:
    try:
        counts = {name.strip(): int(count) for name, count in
                  (part.split("=", 1) for part in text.split(",") if part.strip())}
        return check_replicas(counts)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}" if "=" in text or not text else
                                         f"{text!r}: expected NAME=N[,NAME=N]") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "down", "serve"])
    parser.add_argument("--dir", required=True, type=Path, help="data, logs, KB config and state of the stack")
    parser.add_argument("--workers", type=int, default=1, help="Celery worker processes (default 1)")
    parser.add_argument("--replicas", default="", type=_replica_counts, metavar="NAME=N,...",
                        help=f"processes of each of {', '.join(SCALABLE)} (default 1 each), e.g. retriever=3")
    parser.add_argument("--foreground", action="store_true", help="up: stay attached; Ctrl-C stops everything")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for readiness (or for down)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: at least one worker is needed")
    directory = args.dir.resolve()
    if args.action == "down":
        return _down(directory, args.timeout)
    if args.action == "serve" or args.foreground:
        directory.mkdir(parents=True, exist_ok=True)
        return _serve(directory, args.workers, args.replicas, args.timeout, announce=args.foreground)
    return _up(directory, args.workers, args.replicas, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
