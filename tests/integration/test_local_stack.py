"""The spine's end-to-end scenario against the local multi-process stack (scripts/local_stack.py).

Every service is its own process: PostgreSQL (the control plane), Redis, an Elasticsearch node, a
Milvus server, parser, indexer,
retriever, reranker, generator, gateway and one Celery worker. Knowledge bases use the stack's
KB config (Elasticsearch + Milvus server), created through `ragkb kb create --config`.
"""

from __future__ import annotations

import json
import sys

import grpc
import httpx
import psutil
import psycopg
import pytest

from ragkb import cli
from ragkb.client import RagkbApiError
from shared import tls
from shared.clients import GatewayClient
from shared.contracts import gateway_pb2
from shared.errors import InvalidArgument, NotFound
from shared.profiles import OperatorProfiles
from tests.conftest import ROOT
from tests.integration.conftest import (QUESTIONS, assert_answer_cites_its_chunk,
                                       assert_changed_document_replaces_its_chunks,
                                       assert_next_query_sees_ingest_and_delete, assert_reingest_adds_nothing,
                                       assert_serving_and_listed, ingest_folder)

sys.path.insert(0, str(ROOT / "scripts"))
import local_stack  # noqa: E402

pytestmark = pytest.mark.e2e

KB = "samples"
SERVICES = {
    "parser": "ragkb.v1.ParserService", "indexer": "ragkb.v1.IndexerService",
    "retriever": "ragkb.v1.RetrieverService", "reranker": "ragkb.v1.RerankerService",
    "generator": "ragkb.v1.GeneratorService", "gateway": "ragkb.v1.GatewayService", "worker-1": None,
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = local_stack.LocalStack(tmp_path_factory.mktemp("local-stack"), workers=1).start()
    pids = [s.pid for s in running.services.values()]
    pids += [running.postgres.pid, running.redis.pid, running.elasticsearch.pid, running.milvus.pid]
    yield running
    running.stop()
    assert [pid for pid in pids if psutil.pid_exists(pid)] == [], "processes left running after stop"


@pytest.fixture(scope="module")
def kb_config(stack) -> str:
    return stack.kb_yaml_path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def samples_kb(stack, client):
    assert cli.main(["--url", stack.http_url, "kb", "create", KB, "--config", str(stack.kb_yaml_path)]) == 0
    jobs = ingest_folder(client, KB)
    assert {j["state"] for j in jobs} == {"done"}, [j["error"] for j in jobs]
    return jobs


def test_every_service_is_its_own_process_and_serving(stack):
    assert set(stack.services) == set(SERVICES)
    pids = {name: service.pid for name, service in stack.services.items()}
    assert len(set(pids.values())) == len(pids) and all(psutil.pid_exists(pid) for pid in pids.values())
    for name, service in SERVICES.items():
        inner = name in tls.CALLERS  # every inner service of the stack serves mutual TLS only
        assert_serving_and_listed(stack.services[name].address, service,
                                  tls_dir=stack.settings.tls_dir if inner else "", identity=name if inner else "")
        if inner:
            with pytest.raises(grpc.RpcError):
                assert_serving_and_listed(stack.services[name].address, service)
    health = httpx.get(f"{stack.http_url}/healthz", timeout=10).json()
    assert health["ready"] and set(health["services"].values()) == {"SERVING"}


def test_kb_config_names_the_stack_engines(stack, kb_config):
    profiles = OperatorProfiles.read(stack.settings.data_dir / "profiles.yaml")
    config = local_stack.KBConfig.from_tenant_yaml(kb_config, name="check", profiles=profiles).resolve(profiles)
    assert config.keyword_store.name == "elasticsearch" and config.keyword_store.hosts == (stack.elasticsearch.url,)
    assert config.vector_store.name == "milvus" and config.vector_store.uri == stack.milvus.uri
    assert config.vector_store.search_consistency == "Bounded"  # no search waits for a time tick


@pytest.mark.parametrize("question, answer, doc_id", QUESTIONS)
def test_answer_cites_the_chunk_that_contains_it(client, samples_kb, question, answer, doc_id):
    assert_answer_cites_its_chunk(client.query(KB, question), question, answer, doc_id)


def test_chunks_live_in_the_elasticsearch_node(stack, client, samples_kb):
    indexed = httpx.get(f"{stack.elasticsearch.url}/ragkb-kb-{KB}/_count", timeout=10).json()["count"]
    assert indexed == int(client.get_kb(KB)["chunk_count"]) > 0


def test_control_plane_state_is_in_postgres_and_not_on_disk(stack, client, samples_kb):
    """Catalog, registry, jobs, uploads and traces are rows of the stack's PostgreSQL; the data directory
    holds the operator's profiles only, so no service needs another's disk."""
    client.query(KB, "What does the warranty cover?")
    with psycopg.connect(stack.settings.database_url) as db:
        def count(sql: str) -> int:
            return db.execute(sql).fetchone()[0]

        assert count(f"SELECT count(*) FROM kb_catalog WHERE name = '{KB}'") == 1
        chunk_ids = [json.loads(row[0]) for row in
                     db.execute(f"SELECT chunk_ids FROM documents WHERE kb = '{KB}' AND status = 'indexed'")]
        assert sum(map(len, chunk_ids)) == int(client.get_kb(KB)["chunk_count"]) > 0
        assert count(f"SELECT count(*) FROM jobs WHERE kb = '{KB}' AND state = {gateway_pb2.JOB_STATE_DONE}") \
            == len(samples_kb)
        assert count("SELECT count(*) FROM job_uploads") == 0  # discarded once indexed
        assert count("SELECT count(*) FROM traces") >= 1
    assert sorted(p.name for p in stack.settings.data_dir.iterdir()) == ["profiles.yaml"]


def test_a_done_job_is_searchable_and_a_deleted_document_gone_in_another_process(client, kb_config):
    """The retriever is not the process that wrote: the indexer's wait at Bounded covers it too."""
    client.create_kb("fresh", config_yaml=kb_config)
    assert_next_query_sees_ingest_and_delete(client, "fresh")


def test_reingesting_unchanged_documents_adds_nothing(client, samples_kb):
    assert_reingest_adds_nothing(client, KB)


def test_changed_document_replaces_its_chunks(client, kb_config):
    client.create_kb("changes", config_yaml=kb_config)
    assert_changed_document_replaces_its_chunks(client, "changes")


def test_unknown_knowledge_base_is_not_found(stack, client):
    with pytest.raises(RagkbApiError) as error:
        client.query("no-such-kb", "anything")
    assert error.value.status == 404 and "no-such-kb" in error.value.message
    with pytest.raises(NotFound, match="no-such-kb"):
        GatewayClient(stack.settings.gateway_grpc_addr).query(gateway_pb2.QueryRequest(kb="no-such-kb", query="x"))


def test_empty_query_is_an_invalid_argument(stack, client, samples_kb):
    with pytest.raises(RagkbApiError) as error:
        client.query(KB, "")
    assert error.value.status == 400 and "empty" in error.value.message
    with pytest.raises(InvalidArgument, match="empty"):
        GatewayClient(stack.settings.gateway_grpc_addr).query(gateway_pb2.QueryRequest(kb=KB, query=""))
