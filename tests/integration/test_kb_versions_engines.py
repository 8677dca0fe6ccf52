"""KB versions on a real Elasticsearch node and Milvus server, through the embedded stack's REST API, gRPC
API and CLI: a re-embed with another embedder under continuous query load, writes during the re-index, the
live aliases, rollback as one alias swap, a refused gate, drop.

The second embedder is a tiny random BERT encoder (tests/tiny_m3.py's, read by sentence-transformers with mean
pooling: the Milvus 2.3 server has no sparse-vector field for bge-m3's lexical weights), 32-d against MiniLM's 384-d.
"""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from elasticsearch import Elasticsearch

from ragkb.cli import main as cli
from ragkb.client import RagkbApiError, RagkbClient
from ragkb.embedded import EmbeddedStack
from shared import components
from shared.config import Settings
from shared.contracts import gateway_pb2_grpc, indexer_pb2
from shared.kb import KnowledgeBaseCatalog
from shared.kb_settings import config_version
from shared.kb_versions import VersionRows, version_config
from shared.stores.milvus import milvus_client
from tests.integration.conftest import ingest_folder
from tests.integration.versions_support import DOCS, Indexing, QueryLoad, write_golden
from tests.tiny_m3 import build_tiny_m3

pytestmark = pytest.mark.integration

KB_YAML = ("keyword_store: {name: elasticsearch}\n"
           "vector_store: {name: milvus, index_type: HNSW, index_params: {M: 16, efConstruction: 64}}\n")
RE_EMBED = "embedder: {name: sentence-transformers, model: tiny-m3, batch_size: 8}\n"
LOAD = ["How long does charging take?", "What is the maximum payload?", "AMR-7 的最大载重是多少？",
        "How do I reset the robot?"]
CLIENT_TIMEOUT_S = 300  # the client fixture's timeout: these calls run long


@pytest.fixture(scope="module")
def stack(tmp_path_factory, es, milvus):
    model = build_tiny_m3(tmp_path_factory.mktemp("tiny-m3"))
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), rpc_timeout_s=180)
    (settings.data_dir / "profiles.yaml").write_text(
        f"keyword_store: {{default: {{hosts: ['{es.url}']}}}}\nvector_store: {{default: {{uri: '{milvus.uri}'}}}}\n"
        f"models: {{tiny-m3: '{model}'}}\n", encoding="utf-8")
    running = EmbeddedStack(settings, ephemeral_ports=True).start()
    yield running
    running.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def querying(client: RagkbClient, kb: str):
    """`ask` for QueryLoad over the gateway's REST API; records each answer's trace id."""
    def ask(query: str) -> tuple[str, str]:
        answer = client.query(kb, query)
        problem = "" if answer["chunks"] and not answer["degraded"] else \
            f"{len(answer['chunks'])} chunks, degraded {answer['degraded']}"
        return answer["trace_id"], problem

    return ask


def wait_built(client: RagkbClient, kb: str, version: int) -> dict:
    deadline = time.monotonic() + 600
    while (found := client.get_version(kb, version))["state"] == "building" and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def stores(stack, kb: str, version: int):
    catalog = KnowledgeBaseCatalog.for_settings(stack.settings)
    config = version_config(VersionRows.for_settings(stack.settings).get(kb, version), catalog.profiles)
    return components.keyword_store_for(config, stack.settings), components.vector_store_for(config, stack.settings)


def test_a_re_embed_under_load_switches_the_aliases_and_rolls_back_in_one_swap(stack, client, es, capsys):
    kb = unique("blue-green")
    client.create_kb(kb, config_yaml=KB_YAML)
    ingest_folder(client, kb)
    catalog = KnowledgeBaseCatalog.for_settings(stack.settings)
    before = config_version(catalog.tenant_config(kb))
    assert [(v["version"], v["state"]) for v in client.list_versions(kb)] == [(1, "live")]
    documents = {d["doc_id"] for d in client.list_documents(kb)}
    gone = sorted(documents)[0]
    with QueryLoad(LOAD, querying(client, kb)) as load:
        load.wait_for(4)
        assert client.create_version(kb, RE_EMBED)["state"] == "building"
        # written while version 2 is built
        job = client.upload(kb, "late.md", b"# Night mode\n\nThe robot dims its lights to amber in night mode.\n",
                            doc_id="late")
        assert client.wait([job["job_id"]], timeout_s=300)[0]["state"] == "done"
        client.delete_document(kb, gone)
        built = wait_built(client, kb, 2)
        assert built["state"] == "ready", built["error"]
        load.wait_for(4)
        assert cli(["--url", stack.http_url, "kb", "switch", kb, "2"]) == 0
        after = config_version(catalog.tenant_config(kb))
        load.wait_for(8)
    assert load.failures == []
    answered = [client.trace(t)["request"]["kb_version"] for t in load.answered]
    # old, then new, never back
    assert answered == [before] * answered.count(before) + [after] * answered.count(after)
    assert answered.count(before) >= 4 and answered.count(after) >= 8
    assert "v2\tlive" in capsys.readouterr().out

    v1_keyword, v1_vector = stores(stack, kb, 1)
    v2_keyword, v2_vector = stores(stack, kb, 2)
    engine = Elasticsearch(es.url)
    assert list(engine.indices.get_alias(name=v2_keyword.alias)) == [v2_keyword.index]
    assert milvus_client(v2_vector.uri).describe_alias(v2_vector.alias)["collection_name"] == v2_vector.collection
    assert v2_vector.dimension == 32 and v1_vector.dimension == 384
    assert v2_keyword.chunk_ids("default", "late") and not v2_keyword.chunk_ids("default", gone)
    assert v2_vector.chunk_ids("default", "late") and not v2_vector.chunk_ids("default", gone)
    assert v2_keyword.count() == v1_keyword.count() == v2_vector.count() == v1_vector.count()

    held = v1_keyword.count()
    assert cli(["--url", stack.http_url, "kb", "rollback", kb]) == 0  # back to the version retired last
    assert {v["version"]: v["state"] for v in client.list_versions(kb)} == {1: "live", 2: "retired"}
    assert config_version(catalog.tenant_config(kb)) == before
    # one alias swap: each alias names exactly the old index and collection again, and no data moved
    assert list(engine.indices.get_alias(name=v1_keyword.alias)) == [v1_keyword.index]
    assert milvus_client(v1_vector.uri).describe_alias(v1_vector.alias)["collection_name"] == v1_vector.collection
    assert v1_keyword.count() == held == v2_keyword.count()
    assert client.query(kb, LOAD[0])["chunks"]

    dropped = client.drop_version(kb, 2)
    assert dropped["state"] == "dropped"
    assert not engine.indices.exists(index=v2_keyword.index)
    assert not milvus_client(v2_vector.uri).has_collection(v2_vector.collection)
    engine.close()


def test_a_refused_gate_leaves_the_old_version_live(stack, client, tmp_path, capsys):
    kb = unique("gated")
    client.create_kb(kb, config_yaml=KB_YAML)
    jobs = [client.upload(kb, f"{doc_id}.txt", text.encode(), doc_id=doc_id)["job_id"] for doc_id, text in DOCS.items()]
    assert {j["state"] for j in client.wait(jobs, timeout_s=300)} == {"done"}
    catalog = KnowledgeBaseCatalog.for_settings(stack.settings)
    operator = catalog.tenant_config(kb)  # the operator names the golden questions (a server path)
    catalog.replace(operator.model_copy(update={"retriever": operator.retriever.model_copy(
        update={"golden_questions": str(write_golden(tmp_path / "golden.jsonl")), "max_ndcg_drop": 0.0})}))
    (tmp_path / "version.yaml").write_text(RE_EMBED, encoding="utf-8")
    url = ["--url", stack.http_url]
    assert cli([*url, "kb", "version", "create", kb, "--config", str(tmp_path / "version.yaml"), "--wait"]) == 0
    assert "v2\tready" in capsys.readouterr().out
    assert cli([*url, "kb", "switch", kb, "2"]) == 1
    assert "refused: nDCG@10" in capsys.readouterr().err
    with pytest.raises(RagkbApiError, match="refused: nDCG@10"):
        client.switch_version(kb, 2)
    assert cli([*url, "kb", "versions", kb]) == 0
    listed = capsys.readouterr().out
    assert "v1\tlive" in listed and "v2\tready" in listed and "gate: refused" in listed
    assert {v["version"]: v["state"] for v in client.list_versions(kb)} == {1: "live", 2: "ready"}
    decision = client.get_version(kb, 2)["decision"]
    assert decision["outcome"] == "refused" and decision["before"]["hybrid"] > decision["after"]["hybrid"]
    assert catalog.get(kb).index_version == 1
    # the same state over the gateway's gRPC API
    with grpc.insecure_channel(stack.settings.gateway_grpc_addr) as channel:
        listed = gateway_pb2_grpc.GatewayServiceStub(channel).ListVersions(indexer_pb2.ListVersionsRequest(kb=kb),
                                                                          timeout=30)
    assert [(v.version, v.state) for v in listed.versions] == [(1, "live"), (2, "ready")]


def test_aliases_an_interrupted_switch_left_ahead_are_pointed_back_on_start_and_searches_follow_them(stack, client,
                                                                                                     es):
    kb = unique("interrupted")
    client.create_kb(kb, config_yaml=KB_YAML)
    jobs = [client.upload(kb, f"{doc_id}.txt", text.encode(), doc_id=doc_id)["job_id"] for doc_id, text in DOCS.items()]
    assert {j["state"] for j in client.wait(jobs, timeout_s=300)} == {"done"}
    client.create_version(kb, RE_EMBED)
    assert wait_built(client, kb, 2)["state"] == "ready"
    v1_keyword, v1_vector = stores(stack, kb, 1)
    v2_keyword, v2_vector = stores(stack, kb, 2)
    # the switch's alias step ran, then the process stopped: the aliases name version 2, the catalog version 1
    v2_keyword.make_live()
    v2_vector.make_live()
    engine, milvus = Elasticsearch(es.url), milvus_client(v2_vector.uri)
    # both engines answer a search through the alias from what it names (pymilvus against the Milvus server too)
    (hit,) = engine.search(index=v2_keyword.alias, query={"match_all": {}}, size=1)["hits"]["hits"]
    assert hit["_index"] == v2_keyword.index
    probe = [[0.1] * v2_vector.dimension]
    through_alias, direct = (
        [h["id"] for h in milvus.search(name, data=probe, anns_field="vector", limit=3,
                                        filter='namespace in ["default"]')[0]]
        for name in (v2_vector.alias, v2_vector.collection))
    assert through_alias == direct and len(direct) == 3

    Indexing.build(stack.settings).versions.repair_every_live()  # what the next indexer does on start
    assert list(engine.indices.get_alias(name=v1_keyword.alias)) == [v1_keyword.index]
    assert milvus.describe_alias(v1_vector.alias)["collection_name"] == v1_vector.collection
    assert {v["version"]: v["state"] for v in client.list_versions(kb)} == {1: "live", 2: "ready"}
    assert client.switch_version(kb, 2)["state"] == "live"  # the switch, repeated, completes
    assert client.switch_version(kb, 2)["state"] == "live"  # and once more changes nothing
    assert milvus.describe_alias(v2_vector.alias)["collection_name"] == v2_vector.collection
    engine.close()
