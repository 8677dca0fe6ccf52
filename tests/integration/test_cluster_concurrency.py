"""Cluster mode under concurrency: many replicas of each kind, one control plane, no shared disk.

The local stack runs PostgreSQL, Redis, an Elasticsearch node and a Milvus server under 2 gateways,
2 indexers, 3 retrievers and 3 Celery workers (parser, reranker and generator once each), every one its
own process. 500 documents are uploaded through both gateways while 4 clients query through both;
part-way through, one gateway, one indexer, one retriever and one worker are SIGKILLed. Then every job
must be done, the registry, Elasticsearch and Milvus must hold the same chunks, no query may have
failed, and a KB config change must reach every retriever replica on its next request.

The clients do what a load balancer in front of the gateways does: a request whose gateway stopped
answering is sent to the other one. A query counts as failed when no gateway answers it.
"""

from __future__ import annotations

import itertools
import random
import signal
import sys
import threading
import time

import httpx
import pytest

from ragkb.client import RagkbClient
from shared import kb_settings, tenancy
from shared.clients import RetrieverClient
from shared.contracts import chunk_pb2, retriever_pb2
from shared.kb import KnowledgeBaseCatalog
from tests.conftest import ROOT
from tests.integration.conftest import ingest_folder

sys.path.insert(0, str(ROOT / "scripts"))
import local_stack  # noqa: E402

pytestmark = pytest.mark.e2e

KB = "cluster"
DOCUMENTS = 500
UPLOADERS = 4
QUERY_CLIENTS = 4
KILL_AFTER_DONE = 150  # jobs done before one replica of each kind is killed
REPLICAS = {"gateway": 2, "indexer": 2, "retriever": 3}
WORKERS = 3
# a killed worker's task comes back after the broker's visibility timeout (2.5 x this): keep it short
STEP_TIMEOUT_S = 40.0
CONNECTION_LOST = (httpx.TransportError,)

STATIONS = ["Alder", "Birch", "Cedar", "Dunmore", "Elsing", "Fenwick", "Garron", "Holloway", "Inver", "Jessop",
            "Kestrel", "Linden", "Marrow", "Norcross", "Oakham", "Pellow", "Quarry", "Rushden", "Selby", "Tarrant"]
REGIONS = ["northern", "coastal", "upland", "river", "eastern", "valley", "harbour", "forest"]
CARGO = ["grain", "timber", "coal", "wool", "salt", "copper", "tea", "cotton", "iron ore", "paper"]


def station_document(n: int, rng: random.Random) -> tuple[str, bytes]:
    """A short Markdown document with facts that belong to it alone (its code, year, length, cargo)."""
    name = f"{rng.choice(STATIONS)} {n:03d}"
    region, cargo = rng.choice(REGIONS), rng.choice(CARGO)
    year, length = rng.randint(1850, 1990), rng.randint(80, 420)
    text = (f"# Relay station {name}\n\n"
            f"Relay station {name} on the {region} line opened in {year}. Its loading platform is {length} "
            f"metres long and it mainly handles {cargo}.\n\n"
            f"## Operations\n\nTrains stop at {name} for {rng.randint(2, 30)} minutes; the signal box code is "
            f"RS-{n:03d}-{rng.randint(100, 999)}.\n")
    return f"station-{n:03d}.md", text.encode()


class Gateways:
    """Round robin over the gateways' REST addresses; a request whose gateway is gone goes to the next."""

    def __init__(self, urls: list[str]):
        self._clients = [RagkbClient(url, timeout_s=120) for url in urls]
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def call(self, method: str, *args, **kwargs):
        with self._lock:
            first = next(self._turn)
        errors = []
        for offset in range(len(self._clients)):
            client = self._clients[(first + offset) % len(self._clients)]
            try:
                return getattr(client, method)(*args, **kwargs)
            except CONNECTION_LOST as error:  # the gateway is gone; an error it answers is a failure
                errors.append(f"{client.base_url}: {error!r}")
        raise ConnectionError(f"no gateway answered {method}: {errors}")

    def close(self) -> None:
        for client in self._clients:
            client.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = local_stack.LocalStack(tmp_path_factory.mktemp("cluster-stack"), workers=WORKERS, replicas=REPLICAS,
                                     overrides={"ingest_step_timeout_s": STEP_TIMEOUT_S}).start(timeout_s=600)
    yield running
    running.stop()


# pytest-timeout's box covers the module's stack start-up (80 s here), the 500 documents (about 500 s on a loaded
# 2-core machine) and the teardown: the default 600 s ran out in a teardown once
@pytest.mark.timeout(1200)
def test_replicas_of_every_kind_ingest_and_answer_while_one_of_each_is_killed(stack):
    names = set(stack.services)
    assert {"gateway", "gateway-2", "indexer", "indexer-2", "retriever", "retriever-2", "retriever-3",
            "worker-1", "worker-2", "worker-3"} <= names
    gateways = Gateways(stack.http_urls)
    first = RagkbClient(stack.http_url)
    first.create_kb(KB, config_yaml=stack.kb_yaml_path.read_text(encoding="utf-8"))
    assert {j["state"] for j in ingest_folder(first, KB)} == {"done"}

    rng = random.Random(20261201)
    documents = [station_document(n, rng) for n in range(DOCUMENTS)]
    job_ids: dict[str, str] = {}  # job id -> file name
    upload_errors: list[str] = []
    queries: list[str] = []
    query_failures: list[str] = []
    stop_queries = threading.Event()
    lock = threading.Lock()

    def upload(part: list[tuple[str, bytes]]) -> None:
        for name, content in part:
            try:
                job = gateways.call("upload", KB, name, content)
            except Exception as error:  # recorded, and the test fails on it below
                upload_errors.append(f"{name}: {error!r}")
                continue
            with lock:
                job_ids[job["job_id"]] = name

    def ask(seed: int) -> None:
        ask_rng = random.Random(seed)
        while not stop_queries.is_set():
            n = ask_rng.randrange(DOCUMENTS)
            question = f"When did relay station {n:03d} open and what does it handle?"
            try:
                result = gateways.call("query", KB, question)
                if not result["chunks"]:
                    query_failures.append(f"{question}: no chunks")
            except Exception as error:
                query_failures.append(f"{question}: {error!r}")
            queries.append(question)

    uploaders = [threading.Thread(target=upload, args=(documents[i::UPLOADERS],)) for i in range(UPLOADERS)]
    askers = [threading.Thread(target=ask, args=(seed,)) for seed in range(QUERY_CLIENTS)]
    for thread in (*uploaders, *askers):
        thread.start()
    killed: list[str] = []
    try:
        deadline = time.monotonic() + 1800
        while True:
            jobs = gateways.call("list_jobs", KB, limit=1000)
            done = sum(j["state"] == "done" for j in jobs if j["job_id"] in job_ids)
            if not killed and done >= KILL_AFTER_DONE:
                for name in ("gateway-2", "indexer-2", "retriever-3", "worker-3"):
                    stack.services[name].process.send_signal(signal.SIGKILL)
                    killed.append(name)
            uploading = any(t.is_alive() for t in uploaders)
            final = [j for j in jobs if j["job_id"] in job_ids and j["state"] in ("done", "failed", "cancelled")]
            if killed and not uploading and len(final) == len(job_ids):
                break
            assert time.monotonic() < deadline, f"{len(job_ids) - len(final)} jobs not final after 30 minutes"
            time.sleep(2)
    finally:
        stop_queries.set()
        for thread in (*uploaders, *askers):
            thread.join(timeout=300)

    assert killed, "the run ended before the replicas could be killed"
    assert upload_errors == []
    assert len(set(job_ids.values())) == DOCUMENTS
    states = {j["job_id"]: (j["state"], j["error"]) for j in gateways.call("list_jobs", KB, limit=1000)}
    assert {job_id: states[job_id] for job_id in job_ids if states[job_id][0] != "done"} == {}
    assert len(queries) > 50 and query_failures == []

    # every document exactly once, and the registry, Elasticsearch and Milvus hold the same chunks
    documents_listed = gateways.call("list_documents", KB)
    stations = [d for d in documents_listed if d["doc_id"].startswith("station-")]
    assert sorted(d["doc_id"] for d in stations) == sorted(name for name, _ in documents)
    assert {d["status"] for d in documents_listed} == {"indexed"}
    report = gateways.call("reconcile", KB, dry_run=True)
    registry_chunks = sum(int(d["chunk_count"]) for d in documents_listed)
    assert report.get("repairs", []) == []
    assert int(report["keyword_chunks"]) == int(report["vector_chunks"]) == registry_chunks

    # a document written while replicas were dying is found through the surviving gateway
    name, content = documents[42]
    opening = content.decode().split("\n\n")[1].split(". ")[0]  # "Relay station X 042 on the ... opened in ..."
    result = first.query(KB, f"{opening}?")
    assert name in {c["chunk"]["doc_id"] for c in result["chunks"]}, (opening, result["chunks"])

    assert_config_change_reaches_every_replica(stack, first, [n for n in ("retriever", "retriever-2")])
    gateways.close()
    first.close()


def assert_config_change_reaches_every_replica(stack, client: RagkbClient, replicas: list[str]) -> None:
    """After a retriever setting changes, the gateway's next query and each live replica's next request use it."""
    catalog = KnowledgeBaseCatalog.for_settings(stack.settings)
    for fusion in ("rrf", "convex"):
        config = catalog.tenant_config(KB)
        catalog.replace(config.model_copy(update={"retriever": config.retriever.model_copy(update={"fusion": fusion})}))
        answer = client.query(KB, "How long does it take to charge the AMR-7 from 20% to 80%?")
        assert answer["stages"]["retrieval"]["metadata"]["fusion"].startswith(fusion)
        settings = kb_settings.for_catalog(catalog, KB)
        for name in replicas:
            retriever = RetrieverClient(stack.services[name].address, tls_dir=stack.settings.tls_dir,
                                        identity="gateway")
            try:
                with tenancy.acting_for(tenancy.operator_tenant("cluster-test", namespaces=["default"])), \
                        kb_settings.using(settings):
                    response = retriever.retrieve(retriever_pb2.RetrieveRequest(
                        kb=KB, query="AMR-7 charging time", top_k=5,
                        filter=chunk_pb2.SearchFilter(namespaces=["default"])))
            finally:
                retriever.close()
            assert response.candidates and response.fusion.startswith(fusion), (name, response.fusion)
