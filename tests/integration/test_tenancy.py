"""Tenancy: API keys scope every query to their namespaces and document ACL groups, inside the store queries."""

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ragkb.client import RagkbApiError, RagkbClient
from services.gateway.auth import key_store_for
from shared.contracts import chunk_pb2
from shared.stores.milvus import MilvusVectorStore
from shared.stores.sqlite_fts import SqliteFtsKeywordStore

pytestmark = pytest.mark.integration

KB = "tenants"
TOPICS = [
    ("battery charging takes 45 minutes on the dock", "电池 充电 需要 四十五 分钟"),
    ("the maximum payload is 300 kilograms", "最大 载重 是 三百 公斤"),
    ("firmware update adds obstacle rerouting", "固件 更新 增加 避障 重新 规划"),
    ("pairing code is valid for ten minutes", "配对 码 有效期 十 分钟"),
    ("telemetry data is kept for thirty days", "遥测 数据 保留 三十 天"),
]
ACLS = ["", "hr", "finance", "hr,finance", "legal"]
KEYS = {  # name -> (namespaces, groups)
    "a-plain": (["team-a"], []),
    "a-hr": (["team-a"], ["hr"]),
    "a-finance": (["team-a", "shared"], ["finance"]),
    "a-hr-legal": (["team-a"], ["hr", "legal"]),
}


def document(namespace: str, index: int, acl: str) -> str:
    rng = random.Random(f"{namespace}-{index}")
    sentences = [en if rng.random() < 0.5 else zh for en, zh in rng.sample(TOPICS, 3)]
    return f"# {namespace} note {index} ({acl or 'public'})\n\n" + "\n\n".join(f"{s}。" for s in sentences) + "\n"


@pytest.fixture(scope="module")
def tenants(stack, client):
    """A corpus in team-a, team-b and shared with every ACL combination; then keys, which turn auth on."""
    client.create_kb(KB)
    jobs = []
    for namespace in ("team-a", "team-b", "shared"):
        for index, acl in enumerate(ACLS):
            name = f"{namespace}-{index}.md"
            jobs.append(client.upload(KB, name, document(namespace, index, acl).encode(), namespace=namespace,
                                      acl=acl)["job_id"])
    assert {j["state"] for j in client.wait(jobs, timeout_s=300)} == {"done"}
    # the first admin key is made on the server (as `ragkb keys create` does), never over the API
    admin = key_store_for(stack.settings).create("root", role="admin", namespaces=["*"], groups=["*"])
    admin_client = RagkbClient(client.base_url, api_key=admin)
    keys = {name: admin_client.create_key(name, role="reader", namespaces=ns, groups=groups)["key"]
            for name, (ns, groups) in KEYS.items()}
    keys["b-writer"] = admin_client.create_key("b-writer", role="writer", namespaces=["team-b"])["key"]
    clients = {name: RagkbClient(client.base_url, api_key=key) for name, key in keys.items()}
    yield {"admin": admin_client, **clients}
    admin_client.set_steps({})
    for name in [*KEYS, "b-writer", "root"]:
        admin_client.delete_key(name)
    for c in clients.values():
        c.close()
    admin_client.close()


def allowed(entry: dict, namespaces: list[str], groups: list[str]) -> bool:
    acl = entry["chunk"]["metadata"].get("acl", "") if "chunk" in entry else None
    if acl is None:  # a trace entry: look the document's ACL up from its name
        index = int(entry["doc_id"].rsplit("-", 1)[1].removesuffix(".md"))
        acl = ACLS[index]
    namespace = entry["chunk"]["namespace"] if "chunk" in entry else entry["namespace"]
    doc_groups = [g for g in acl.split(",") if g]
    return namespace in namespaces and (not doc_groups or bool(set(doc_groups) & set(groups)))


def test_auth_is_required_once_keys_exist(client, tenants):
    with pytest.raises(RagkbApiError) as anonymous:
        client.query(KB, "battery charging")
    assert anonymous.value.status == 401
    with pytest.raises(RagkbApiError) as other_namespace:
        tenants["a-hr"].query(KB, "battery charging", namespaces=["team-b"])
    assert other_namespace.value.status == 403 and other_namespace.value.stage == "pre-retrieval"
    with pytest.raises(RagkbApiError) as reader_upload:
        tenants["a-hr"].upload(KB, "x.md", b"# x\n\nhello", namespace="team-a")
    assert reader_upload.value.status == 403
    with pytest.raises(RagkbApiError) as foreign_upload:
        tenants["b-writer"].upload(KB, "x.md", b"# x\n\nhello", namespace="team-a")
    assert foreign_upload.value.status == 403
    with pytest.raises(RagkbApiError) as not_admin:
        tenants["b-writer"].list_keys()
    assert not_admin.value.status == 403
    assert {d["namespace"] for d in tenants["a-finance"].list_documents(KB)} == {"team-a", "shared"}


def test_randomized_queries_never_cross_namespaces_or_acls(tenants):
    """1,000 seeded random queries: no chunk of another namespace, none whose ACL excludes the caller."""
    tenants["admin"].set_steps({"generation": {"enabled": False}})  # retrieval is what is under test
    rng = random.Random(7)
    words = [w for en, zh in TOPICS for w in (en.split() + zh.split())]
    cases = []
    for _ in range(1000):
        name = rng.choice(list(KEYS))
        namespaces, groups = KEYS[name]
        asked = rng.choice([[], namespaces[:1], namespaces])
        query = " ".join(rng.sample(words, rng.randint(1, 5)))
        cases.append((name, asked or namespaces, groups, query, rng.randint(1, 30)))

    def run(case):
        name, namespaces, groups, query, top_k = case
        result = tenants[name].query(KB, query, namespaces=namespaces, top_k=top_k)
        leaks = [c["chunk"]["doc_id"] for c in result["chunks"] if not allowed(c, namespaces, groups)]
        return result["trace_id"], len(result["chunks"]), leaks

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(run, cases))
    assert [leak for _, _, leak in outcomes if leak] == []
    assert sum(n for _, n, _ in outcomes) > 1000  # the queries do find things
    # the route lists themselves (before fusion and reranking) never held an excluded chunk either
    for (trace_id, _, _), (name, namespaces, groups, _, _) in list(zip(outcomes, cases))[::50]:
        lists = tenants[name].trace(trace_id)["lists"]
        for route in ("bm25", "dense", "fused"):
            assert all(allowed(e, namespaces, groups) for e in lists[route]), (route, trace_id)


def test_traces_are_visible_only_to_their_tenant(tenants):
    asked = tenants["a-hr"].query(KB, "payload")
    trace_id = asked["trace_id"]
    assert any("hr" in c["chunk"]["metadata"].get("acl", "").split(",") for c in asked["chunks"])  # hr-only chunks used
    own = tenants["a-hr"].trace(trace_id)
    assert own["withheld"] == 0 and own["answer"] == asked["answer"]
    # the same namespace without the hr group: the trace exists, but nothing it may not read is in it
    seen = tenants["a-plain"].trace(trace_id)
    assert seen["trace_id"] == trace_id and seen["withheld"] > 0
    entries = [e for entries in seen["lists"].values() if isinstance(entries, list) for e in entries]
    assert all(e.get("withheld") or e["acl"] == "" for e in entries)
    assert seen["answer"] is None and seen["citations"] == [] and seen["answer_withheld"]
    with pytest.raises(RagkbApiError) as foreign:
        tenants["b-writer"].trace(trace_id)
    assert foreign.value.status == 404


@pytest.fixture(params=["sqlite-fts5", "milvus-lite"])
def store(request, tmp_path):
    if request.param == "sqlite-fts5":
        yield SqliteFtsKeywordStore(tmp_path / "kw.sqlite")
    else:
        yield MilvusVectorStore(str(tmp_path / "milvus.db"), kb="acl", model_id="unit", dimension=4)


def test_acl_filter_runs_inside_the_store_query(store):
    """With limit=1 the best match is excluded by ACL: an in-query filter still returns the next allowed chunk."""
    chunks = [chunk_pb2.KnowledgeChunk(chunk_id=f"c{i}", doc_id=f"d{i}", namespace="ns", content=text,
                                       metadata={"acl": acl} if acl else {})
              for i, (text, acl) in enumerate([("alpha alpha alpha", "secret"), ("alpha beta", ""),
                                               ("alpha gamma", "hr,team_x")])]
    vectors = np.array([[1, 0, 0, 0], [0.8, 0.6, 0, 0], [0.6, 0.8, 0, 0]], dtype=np.float32)

    def search(groups, limit=1):
        search_filter = chunk_pb2.SearchFilter(namespaces=["ns"], acl_enforced=groups is not None,
                                               acl_groups=groups or [])
        if isinstance(store, SqliteFtsKeywordStore):
            return [c.chunk.chunk_id for c in store.search("alpha", search_filter, limit)]
        return [c.chunk.chunk_id for c in store.search(vectors[0], search_filter, limit)]

    if isinstance(store, SqliteFtsKeywordStore):
        store.upsert(chunks)
    else:
        store.upsert(chunks, vectors)
    assert search(None) == ["c0"]                      # ACLs not enforced (auth off)
    assert search([]) == ["c1"]                        # public only
    assert search([], limit=10) == ["c1"]
    assert sorted(search(["team_x"], limit=10)) == ["c1", "c2"]
    assert sorted(search(["team%"], limit=10)) == ["c1"]  # LIKE wildcards are not wildcards here
    assert sorted(search(["secret", "hr"], limit=10)) == ["c0", "c1", "c2"]


def test_grpc_calls_need_a_key_and_are_scoped_by_it(stack, tenants):
    import grpc

    from shared.contracts import gateway_pb2, gateway_pb2_grpc, indexer_pb2

    key = tenants["a-hr"]._http.headers["authorization"].removeprefix("Bearer ")
    request = gateway_pb2.QueryRequest(kb=KB, query="payload 载重")
    with grpc.insecure_channel(stack.settings.gateway_grpc_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        with pytest.raises(grpc.RpcError) as anonymous:
            stub.Query(request, timeout=30)
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
        response = stub.Query(request, metadata=[("authorization", f"Bearer {key}")], timeout=30)
        assert response.chunks and all(c.chunk.namespace == "team-a" for c in response.chunks)
        assert all(c.chunk.metadata.get("acl", "") in ("", "hr", "hr,finance") for c in response.chunks)
        with pytest.raises(grpc.RpcError) as foreign:
            stub.Query(gateway_pb2.QueryRequest(kb=KB, query="payload", namespaces=["team-b"]),
                       metadata=[("x-api-key", key)], timeout=30)
        assert foreign.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as reader_write:
            stub.DeleteDocument(indexer_pb2.DeleteDocumentRequest(kb=KB, namespace="team-a", doc_id="team-a-0.md"),
                                metadata=[("x-api-key", key)], timeout=30)
        assert reader_write.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_grpc_streamed_queries_need_a_key_too(stack, tenants):
    import grpc

    from shared.contracts import gateway_pb2, gateway_pb2_grpc

    with grpc.insecure_channel(stack.settings.gateway_grpc_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        with pytest.raises(grpc.RpcError) as anonymous:
            list(stub.QueryStream(gateway_pb2.QueryRequest(kb=KB, query="payload"), timeout=30))
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
