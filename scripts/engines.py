"""Real engines on loopback for tests and local stacks: an Elasticsearch node, a Milvus server, Redis,
PostgreSQL.

    python scripts/engines.py up --dir D      # start ES + Milvus, print their URLs, return when healthy
    python scripts/engines.py down --dir D    # stop what `up` started in D

As a module: `start_elasticsearch(dir)` -> handle with `.url`, `.pid`, `.stop()`, `.start()`;
`start_milvus(dir)` -> handle with `.uri`, `.pid`, `.stop()`, `.start()`; `start_redis(dir)` -> handle
with `.url`, `.pid`, `.stop()` (the Celery broker of the local stack and the ingestion tests);
`start_postgres()` -> handle with `.dsn`, `.pid`, `.stop()` (the control-plane database of cluster
mode: Debian's postgresql-15, a throw-away cluster run as the `postgres` user, since initdb refuses
root). Ports
are chosen free when a handle is made and kept, so an Elasticsearch node stopped and started again
comes back on the same URL with its data. Milvus 2.3.5 restarted on the same data directory did not
report healthy within 120 s here (its components wait on the previous process's etcd sessions: "node
not match"), so fault tests freeze and resume the Milvus process instead of restarting it.

Elasticsearch: the official server jar and its Netty HTTP/transport module come from Maven
Central (`scripts/elasticsearch/pom.xml`, resolved once with `mvn dependency:build-classpath`);
`scripts/elasticsearch/ElasticsearchNode.java` runs one node in one JVM (-Xmx1g) with the module
laid out as in the official distribution. No x-pack (security off) and no ingest-geoip module (so no
GeoIP downloader). Needs Java 17 + Maven. Milvus: the `milvus` PyPI package's standalone server
(embedded etcd, local storage). Its wrapper ignores SIGTERM, so the handle owns the server process
itself and kills it when a clean stop times out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ES_VERSION = "8.14.3"
ES_DIR = Path(__file__).resolve().parent / "elasticsearch"
ES_MODULE_JARS = ("transport-netty4", "elasticsearch-ssl-config", "netty-")
ES_MODULE_DESCRIPTOR = f"""description=Netty 4 based transport implementation
version={ES_VERSION}
name=transport-netty4
classname=org.elasticsearch.transport.netty4.Netty4Plugin
java.version=17
elasticsearch.version={ES_VERSION}
extended.plugins=
has.native.controller=false
modulename=org.elasticsearch.transport.netty4
"""


class EngineError(RuntimeError):
    """An engine could not be prepared, started or stopped."""


class EngineNotInstalled(EngineError):
    """The engine's program is missing on this machine."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _still_free(port: int) -> int:
    """`port` when it can still be bound, else a new free port."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return free_port()
    return port


def _wait_http(url: str, ok, timeout_s: float, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EngineError(f"{url}: process exited with {process.returncode}; last log lines:\n{log_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if ok(response.read().decode("utf-8", "replace")):
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    raise EngineError(f"{url} not healthy after {timeout_s}s; last log lines:\n{log_tail(log)}")


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _terminate(process: subprocess.Popen | None, grace_s: float) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


# ---------------------------------------------------------------- Elasticsearch


def elasticsearch_classpath(cache: Path) -> tuple[list[str], list[str]]:
    """(server jars, Netty module jars), resolved from Maven Central once and cached in `cache`."""
    cache.mkdir(parents=True, exist_ok=True)
    listing = cache / f"classpath-{ES_VERSION}.txt"
    if not listing.exists():
        if shutil.which("mvn") is None:
            raise EngineError("Maven (mvn) is needed to fetch Elasticsearch from Maven Central; apt-get install maven")
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(ES_DIR / "pom.xml"), "dependency:build-classpath",
             f"-Dmdep.outputFile={listing}"], capture_output=True, text=True)
        if result.returncode != 0 or not listing.exists():
            raise EngineError(f"resolving Elasticsearch {ES_VERSION} from Maven Central failed:\n"
                              f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
    jars = [j for j in listing.read_text().strip().split(os.pathsep) if j]
    module = [j for j in jars if Path(j).name.startswith(ES_MODULE_JARS)]
    return [j for j in jars if j not in module], module


def _compile_launcher(cache: Path, server_jars: list[str]) -> Path:
    classes = cache / "classes"
    source = ES_DIR / "ElasticsearchNode.java"
    compiled = classes / "ElasticsearchNode.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        result = subprocess.run(["javac", "-d", str(classes), "-cp", os.pathsep.join(server_jars), str(source)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise EngineError(f"compiling {source.name} failed:\n{result.stderr[-2000:]}")
    return classes


class ElasticsearchNode:
    """One real Elasticsearch node in its own JVM; data under `home`, kept across stop/start."""

    def __init__(self, home: Path, *, heap: str = "1g", cache: Path | None = None, optimizing_jit: bool = False):
        """`optimizing_jit`: run the JVM's C2 compiler, for long loads (benchmarks); tests start faster on C1 alone."""
        if shutil.which("java") is None:
            raise EngineError("Java 17 is needed to run Elasticsearch; apt-get install openjdk-17-jre-headless")
        self.home = Path(home).resolve()
        self.heap = heap
        self.optimizing_jit = optimizing_jit
        self.cache = Path(cache) if cache else Path.home() / ".cache" / "ragkb" / "elasticsearch"
        self.http_port = free_port()
        self.transport_port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout_s: float = 180) -> ElasticsearchNode:
        server, module = elasticsearch_classpath(self.cache)
        classes = _compile_launcher(self.cache, server)
        module_dir = self.home / "modules" / "transport-netty4"
        module_dir.mkdir(parents=True, exist_ok=True)
        for jar in module:
            if not (module_dir / Path(jar).name).exists():
                shutil.copy2(jar, module_dir)
        (module_dir / "plugin-descriptor.properties").write_text(ES_MODULE_DESCRIPTOR)
        log = self.home / "node.log"
        jit = [] if self.optimizing_jit else ["-XX:TieredStopAtLevel=1"]
        command = ["java", f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseSerialGC", *jit,
                   "-Djava.awt.headless=true", "-Dlog4j2.disable.jmx=true",
                   "--module-path", os.pathsep.join(server), "--add-modules", "ALL-MODULE-PATH",
                   "-cp", str(classes), "ElasticsearchNode", str(self.home), str(self.http_port),
                   str(self.transport_port)]
        with open(log, "ab") as handle:
            self.process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_http(f"{self.url}/_cluster/health", lambda body: '"status":"green"' in body
                       or '"status":"yellow"' in body, timeout_s, self.process, log)
        except BaseException:
            self.stop()  # never leave a half-started JVM behind
            raise
        return self

    def stop(self, grace_s: float = 30) -> None:
        """SIGTERM runs the node's shutdown hook (a clean close); SIGKILL only if that hangs."""
        _terminate(self.process, grace_s)
        self.process = None


def start_elasticsearch(home: Path | str, **options) -> ElasticsearchNode:
    return ElasticsearchNode(Path(home), **options).start()


# ---------------------------------------------------------------- Milvus


class MilvusServer:
    """The Milvus standalone server of the `milvus` package; data under `base`, kept across stop/start."""

    def __init__(self, base: Path):
        try:
            import milvus  # noqa: F401  (the package carries the server binary)
        except ImportError:
            raise EngineError("the Milvus server needs `pip install milvus==2.3.5`") from None
        self.base = Path(base).resolve()
        self.port = free_port()
        self.health_port = free_port()
        # the embedded etcd listens on fixed ports (2379, 2380) unless told otherwise, so a second server on
        # the machine would fail to start; its own ports, kept across restarts like the proxy port
        self.etcd_ports = (free_port(), free_port())
        self._server = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        process = self._server.server_proc if self._server else None
        return process.pid if process else None

    def start(self, timeout_s: float = 120, attempts: int = 3) -> MilvusServer:
        """Start and wait until healthy. Its ports are picked free, then closed before the server binds them,
        so another server starting at the same moment, or an outgoing connection's source port, can take one:
        that start is retried, on fresh ports for those taken (the proxy port stays: it is the URI)."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(timeout_s)
            except EngineError as error:
                if not self._lost_a_port(str(error)) or attempt == attempts:
                    raise
                self.health_port = _still_free(self.health_port)
                self.etcd_ports = tuple(_still_free(port) for port in self.etcd_ports)
        raise AssertionError("unreachable")

    def _lost_a_port(self, error: str) -> bool:
        """Whether the failed start could not bind a port (the message may sit anywhere in the server's logs)."""
        logs = [self.base / "logs" / name for name in ("milvus-stdout.log", "milvus-stderr.log")]
        return any("address already in use" in text
                   for text in (error, *(log.read_text(errors="replace") for log in logs if log.exists())))

    def _start_once(self, timeout_s: float) -> MilvusServer:
        from milvus import MilvusServer as PackagedServer
        from milvus import MilvusServerConfig

        self.base.mkdir(parents=True, exist_ok=True)
        server = PackagedServer(MilvusServerConfig(data_dir=str(self.base)), wait_for_started=False)
        # the proxy port is pinned (a restart must come back on the same URI); the package moves the
        # other internal ports up from their defaults until they are free
        server.config.set("proxy_port", self.port)
        server.webservice_port = self.health_port
        # a short session lease: after a crash or kill the restarted server need not wait out the
        # previous process's 30 s registrations before it reports healthy
        server.config.set("common.session.ttl", 5)
        # the package passes its own environment to the server; Milvus reads `etcd.config.path` from it
        previous = os.environ.get("ETCD_CONFIG_PATH")
        os.environ["ETCD_CONFIG_PATH"] = str(self._etcd_config())
        try:
            server.start()
        finally:
            if previous is None:
                del os.environ["ETCD_CONFIG_PATH"]
            else:
                os.environ["ETCD_CONFIG_PATH"] = previous
        self._server = server
        log = self.base / "logs" / "milvus-stdout.log"
        try:
            _wait_http(f"http://127.0.0.1:{self.health_port}/healthz", lambda body: "OK" in body, timeout_s,
                       server.server_proc, log)
        except BaseException:
            self.stop()
            raise
        return self

    def _etcd_config(self) -> Path:
        peer, client = (f"http://127.0.0.1:{port}" for port in self.etcd_ports)
        path = self.base / "etcd.yaml"
        path.write_text(f"name: default\nlisten-peer-urls: {peer}\ninitial-advertise-peer-urls: {peer}\n"
                        f"initial-cluster: default={peer}\nlisten-client-urls: {client}\n"
                        f"advertise-client-urls: {client}\n", encoding="utf-8")
        return path

    def stop(self, grace_s: float = 10) -> None:
        if self._server is None:
            return
        _terminate(self._server.server_proc, grace_s)
        self._server.server_proc = None
        self._server.stop()  # closes its log files
        self._server = None


def start_milvus(base: Path | str) -> MilvusServer:
    return MilvusServer(Path(base)).start()


# ---------------------------------------------------------------- Redis


class RedisServer:
    """`redis-server` from Debian on a free loopback port, nothing persisted."""

    def __init__(self, directory: Path):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise EngineNotInstalled("redis-server is not installed (apt-get install redis-server)")
        self.directory = Path(directory).resolve()
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout_s: float = 20) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(f"redis-server exited with {self.process.returncode} on port {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise EngineError(f"redis-server did not answer on port {self.port} within {timeout_s}s")

    def stop(self, grace_s: float = 10) -> None:
        _terminate(self.process, grace_s)
        self.process = None


def start_redis(directory: Path | str) -> RedisServer:
    return RedisServer(Path(directory)).start()


# ---------------------------------------------------------------- PostgreSQL


def postgres_bin_dir() -> Path:
    """The newest Debian PostgreSQL (15 or later) under /usr/lib/postgresql."""
    found = sorted((p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
                   key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if not found or not found[-1].parent.name.isdigit() or int(found[-1].parent.name) < 15:
        raise EngineNotInstalled("PostgreSQL 15 is not installed (apt-get install postgresql-15)")
    return found[-1]


class PostgresServer:
    """A throw-away PostgreSQL cluster on a free loopback port, trust auth, durability off (tests only).

    Its directory is made here (mode 0700, owned by `postgres` when run as root), since a pytest
    temp directory under root's 0700 tree is not reachable by the `postgres` user.
    """

    def __init__(self):
        self.bin = postgres_bin_dir()
        self.directory = Path(tempfile.mkdtemp(prefix="ragkb-postgres-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            import pwd

            account = pwd.getpwnam("postgres")
            os.chown(self.directory, account.pw_uid, account.pw_gid)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _run_as(self) -> list[str]:
        """The command prefix that drops root for `postgres`. Not Popen's user/group arguments: those make
        Python fork rather than vfork, so the child runs the parent's pthread_atfork handlers, and gRPC's, in
        a process with live gRPC threads, once aborted postgres before its exec (SIGABRT, "epoll_wait error:
        Bad file descriptor")."""
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups"] if self._as_postgres else []

    def start(self, timeout_s: float = 60) -> PostgresServer:
        data, log = self.directory / "data", self.directory / "postgres.log"
        subprocess.run([*self._run_as(), str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                        "-E", "UTF8", "--locale=C"], check=True, capture_output=True, cwd=self.directory)
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [*self._run_as(), str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
                 "-k", str(self.directory), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=300"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.directory,
                start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(f"postgres exited with {self.process.returncode}:\n{log_tail(log)}")
            ready = subprocess.run([str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                                   capture_output=True)
            if ready.returncode == 0:
                return self
            time.sleep(0.2)
        self.stop()
        raise EngineError(f"postgres not ready on port {self.port} within {timeout_s}s:\n{log_tail(log)}")

    def stop(self, grace_s: float = 20) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # "fast" shutdown: disconnect clients, stop cleanly
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)


def start_postgres() -> PostgresServer:
    return PostgresServer().start()


# ---------------------------------------------------------------- CLI


def _serve(directory: Path) -> int:
    """Run both engines until SIGTERM/SIGINT; `up` runs this detached and `down` signals it."""
    es = start_elasticsearch(directory / "elasticsearch")
    try:
        mv = start_milvus(directory / "milvus")
    except Exception:
        es.stop()
        raise
    state = {"pid": os.getpid(), "elasticsearch": es.url, "milvus": mv.uri}
    (directory / "engines.json").write_text(json.dumps(state))
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    while not stopping:
        time.sleep(0.5)
    mv.stop()
    es.stop()
    (directory / "engines.json").unlink(missing_ok=True)
    return 0


def _up(directory: Path, timeout_s: float) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    state_file = directory / "engines.json"
    state_file.unlink(missing_ok=True)
    with open(directory / "engines.log", "ab") as log:
        process = subprocess.Popen([sys.executable, __file__, "serve", "--dir", str(directory)], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if state_file.exists():
            state = json.loads(state_file.read_text())
            print(f"elasticsearch {state['elasticsearch']}\nmilvus {state['milvus']}\n(pid {state['pid']})")
            return 0
        if process.poll() is not None:
            print(f"engines failed to start:\n{log_tail(directory / 'engines.log', 30)}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    print(f"engines not up after {timeout_s}s; see {directory / 'engines.log'}", file=sys.stderr)
    return 1


def _down(directory: Path) -> int:
    state_file = directory / "engines.json"
    if not state_file.exists():
        print(f"no engines running from {directory}")
        return 0
    pid = json.loads(state_file.read_text())["pid"]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        state_file.unlink(missing_ok=True)
        return 0
    for _ in range(120):
        if not state_file.exists():
            break
        time.sleep(0.5)
    print(f"engines stopped (pid {pid})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "down", "serve"])
    parser.add_argument("--dir", required=True, type=Path, help="where the engines keep data, logs and state")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    if args.action == "up":
        return _up(directory, args.timeout)
    if args.action == "down":
        return _down(directory)
    return _serve(directory)


if __name__ == "__main__":
    sys.exit(main())
