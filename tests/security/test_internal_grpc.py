"""The inner services as an attacker who reaches them directly would try them: no context, forged scopes."""

from __future__ import annotations

import json
import random

import grpc
import pytest

from shared.contracts import (
    chunk_pb2,
    generator_pb2,
    generator_pb2_grpc,
    indexer_pb2,
    indexer_pb2_grpc,
    parser_pb2,
    parser_pb2_grpc,
    reranker_pb2,
    reranker_pb2_grpc,
    retriever_pb2,
    retriever_pb2_grpc,
)
from shared.config import KBConfig
from shared.kb_settings import settings_of
from tests.security.conftest import KB, SECRETS

pytestmark = pytest.mark.integration

STUBS = {"parser": parser_pb2_grpc.ParserServiceStub, "indexer": indexer_pb2_grpc.IndexerServiceStub,
         "retriever": retriever_pb2_grpc.RetrieverServiceStub, "reranker": reranker_pb2_grpc.RerankerServiceStub,
         "generator": generator_pb2_grpc.GeneratorServiceStub}


@pytest.fixture(scope="module")
def stubs(secure_stack):
    servers = secure_stack["stack"].servers
    channels = {name: grpc.insecure_channel(servers[name].address) for name in STUBS}
    yield {name: STUBS[name](channel) for name, channel in channels.items()}
    for channel in channels.values():
        channel.close()


# the KB's settings as the gateway sends them (the secure stack's KB has the default config): a prober can
# send these too, they are tenant-level values
KB_SETTINGS = settings_of(KBConfig(name=KB))


def tenant(namespace: str, *, role: str = "writer", groups: tuple[str, ...] | None = None) -> chunk_pb2.CallContext:
    return chunk_pb2.CallContext(tenant=chunk_pb2.TenantContext(
        principal=f"probe-{namespace}", namespaces=[namespace], role=role,
        acl_enforced=groups is not None, acl_groups=groups or ()), kb=KB_SETTINGS)


ROOT = chunk_pb2.CallContext(tenant=chunk_pb2.TenantContext(principal="probe-root", all_namespaces=True, role="admin"),
                             kb=KB_SETTINGS)


def secret_chunk(stubs, namespace: str) -> chunk_pb2.Candidate:
    """A real stored chunk of a namespace, fetched with an operator context."""
    response = stubs["retriever"].Retrieve(retriever_pb2.RetrieveRequest(
        kb=KB, query=SECRETS[namespace], filter=chunk_pb2.SearchFilter(namespaces=[namespace]), context=ROOT))
    return response.candidates[0]


def every_method(stubs, context: chunk_pb2.CallContext | None, target: str, victim: chunk_pb2.Candidate):
    """(method name, thunk) for every inner RPC, each aimed at namespace `target`."""
    extra = {} if context is None else {"context": context}
    search = chunk_pb2.SearchFilter(namespaces=[target])
    chunk = chunk_pb2.KnowledgeChunk(chunk_id="x" * 16, doc_id="planted", kb=KB, namespace=target,
                                     content="planted", content_hash="h")
    return [
        ("Parse", lambda: stubs["parser"].Parse(parser_pb2.ParseRequest(
            kb=KB, namespace=target, doc_id="p", filename="p.md", content=b"# p\n\nx\n", **extra))),
        ("SupportedTypes", lambda: stubs["parser"].SupportedTypes(parser_pb2.SupportedTypesRequest(**extra))),
        ("CreateKnowledgeBase", lambda: stubs["indexer"].CreateKnowledgeBase(
            indexer_pb2.CreateKnowledgeBaseRequest(name=f"made-by-{target}", **extra))),
        ("GetKnowledgeBase", lambda: stubs["indexer"].GetKnowledgeBase(
            indexer_pb2.GetKnowledgeBaseRequest(name=KB, **extra))),
        ("ListKnowledgeBases", lambda: stubs["indexer"].ListKnowledgeBases(
            indexer_pb2.ListKnowledgeBasesRequest(**extra))),
        ("IndexDocument", lambda: stubs["indexer"].IndexDocument(indexer_pb2.IndexDocumentRequest(
            kb=KB, namespace=target, doc_id="planted", content_hash="h", chunks=[chunk], **extra))),
        ("IndexDocumentStream", lambda: list(stubs["indexer"].IndexDocumentStream(indexer_pb2.IndexDocumentRequest(
            kb=KB, namespace=target, doc_id="planted", content_hash="h", chunks=[chunk], **extra)))),
        ("DeleteDocument", lambda: stubs["indexer"].DeleteDocument(indexer_pb2.DeleteDocumentRequest(
            kb=KB, namespace=target, doc_id=f"{target}-secret.md", **extra))),
        ("ListDocuments", lambda: stubs["indexer"].ListDocuments(indexer_pb2.ListDocumentsRequest(
            kb=KB, namespace=target, **extra))),
        ("Reconcile", lambda: stubs["indexer"].Reconcile(indexer_pb2.ReconcileRequest(
            kb=KB, namespace=target, dry_run=True, **extra))),
        ("Retrieve", lambda: stubs["retriever"].Retrieve(retriever_pb2.RetrieveRequest(
            kb=KB, query=SECRETS[target] if target in SECRETS else "secret", filter=search, **extra))),
        ("ChunksByGroup", lambda: stubs["retriever"].ChunksByGroup(retriever_pb2.ChunksByGroupRequest(
            kb=KB, namespaces=[target], group_ids=[victim.chunk.group_id or victim.chunk.chunk_id], **extra))),
        ("Rerank", lambda: stubs["reranker"].Rerank(reranker_pb2.RerankRequest(
            kb=KB, query="secret", candidates=[victim], **extra))),
        ("RerankSplitParts", lambda: stubs["reranker"].Rerank(reranker_pb2.RerankRequest(
            kb=KB, query="secret", split_parts=chunk_pb2.SplitParts(chunks=[victim.chunk]), **extra))),
        ("Generate", lambda: stubs["generator"].Generate(generator_pb2.GenerateRequest(
            kb=KB, query="what is the secret?", sources=[victim], **extra))),
        ("GenerateStream", lambda: list(stubs["generator"].GenerateStream(generator_pb2.GenerateRequest(
            kb=KB, query="what is the secret?", sources=[victim], **extra)))),
    ]


def test_every_inner_method_refuses_a_call_without_tenant_context(stubs):
    victim = secret_chunk(stubs, "team-b")
    for name, call in every_method(stubs, None, "team-b", victim):
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
        assert "tenant context" in refused.value.details(), name


def test_randomized_tenant_crossing_through_every_inner_method(stubs, secure_stack):
    """>= 600 calls, each acting for one namespace and aimed at the other: none leaks, none changes anything."""
    rng = random.Random(20261201)
    victims = {ns: secret_chunk(stubs, ns) for ns in SECRETS}
    calls = leaks = 0
    outcomes: dict[str, set[str]] = {}
    for _ in range(40):
        own, target = rng.sample(sorted(SECRETS), 2)
        context = tenant(own, role=rng.choice(["reader", "writer", "kb_admin"]))
        for name, call in rng.sample(every_method(stubs, context, target, victims[target]), 15):
            calls += 1
            try:
                response = call()
            except grpc.RpcError as error:
                outcomes.setdefault(name, set()).add(error.code().name)
                continue
            outcomes.setdefault(name, set()).add("OK")
            if SECRETS[target].split()[0] in str(response) or f"{target}-secret" in str(response):
                leaks += 1
    assert calls >= 600 and leaks == 0, outcomes
    # nothing any of them did reached the other tenant's data
    root = secure_stack["clients"]["root"]
    for namespace in SECRETS:
        documents = {d["doc_id"] for d in root.list_documents(KB, namespace)}
        assert f"{namespace}-secret.md" in documents and "planted" not in documents
    for name in ("Retrieve", "DeleteDocument", "IndexDocument", "Rerank", "RerankSplitParts", "Generate",
                 "ChunksByGroup"):
        assert outcomes[name] == {"PERMISSION_DENIED"}, (name, outcomes[name])


def test_acl_groups_in_the_context_are_applied_by_the_retriever(stubs, secure_stack):
    secure_stack["clients"]["a-writer"].wait([secure_stack["clients"]["a-writer"].upload(
        KB, "hr-only.md", b"# HR\n\nThe HR-only bonus pool is 12 percent.\n", namespace="team-a", acl="hr")["job_id"]])
    query = "HR-only bonus pool percent"
    outside = stubs["retriever"].Retrieve(retriever_pb2.RetrieveRequest(
        kb=KB, query=query, filter=chunk_pb2.SearchFilter(namespaces=["team-a"]),
        context=tenant("team-a", role="reader", groups=("finance",))))
    inside = stubs["retriever"].Retrieve(retriever_pb2.RetrieveRequest(
        kb=KB, query=query, filter=chunk_pb2.SearchFilter(namespaces=["team-a"]),
        context=tenant("team-a", role="reader", groups=("hr",))))
    assert "12 percent" not in str(outside.candidates) and "12 percent" in str(inside.candidates)
    # asking for more groups in the filter than the context holds changes nothing
    widened = stubs["retriever"].Retrieve(retriever_pb2.RetrieveRequest(
        kb=KB, query=query, filter=chunk_pb2.SearchFilter(namespaces=["team-a"], acl_enforced=True,
                                                          acl_groups=["hr"]),
        context=tenant("team-a", role="reader", groups=("finance",))))
    assert "12 percent" not in str(widened.candidates)


def with_sections(**sections) -> chunk_pb2.CallContext:
    """The operator context with KB settings whose sections a prober wrote."""
    context = chunk_pb2.CallContext()
    context.CopyFrom(ROOT)
    context.kb.sections_json = json.dumps(sections)
    return context


@pytest.mark.parametrize("sections, field", [
    pytest.param({"vector_store": {"uri": "http://attacker:19530"}}, "vector_store.uri", id="vector-uri"),
    pytest.param({"keyword_store": {"hosts": ["http://attacker:9200"]}}, "keyword_store.hosts", id="es-hosts"),
    pytest.param({"keyword_store": {"index_prefix": "other"}}, "keyword_store.index_prefix", id="index-prefix"),
    pytest.param({"retriever": {"golden_questions": "/etc/passwd"}}, "retriever.golden_questions", id="server-path"),
])
def test_settings_naming_operator_values_are_refused_by_the_retriever(stubs, sections, field):
    """Endpoints, secrets and paths come from the service's own operator profiles, never from a request."""
    with pytest.raises(grpc.RpcError) as refused:
        stubs["retriever"].Retrieve(retriever_pb2.RetrieveRequest(
            kb=KB, query="secret", filter=chunk_pb2.SearchFilter(namespaces=["team-a"]),
            context=with_sections(**sections)))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in refused.value.details()


@pytest.mark.parametrize("sections, field", [
    pytest.param({"generator": {"name": "openai", "base_url": "http://attacker/v1"}}, "generator.base_url",
                 id="llm-url"),
    pytest.param({"generator": {"name": "openai", "api_key_env": "RAGKB_TEST_OPERATOR_SECRET"}},
                 "generator.api_key_env", id="secret-variable"),
    pytest.param({"generator": {"templates_dir": "/etc"}}, "generator.templates_dir", id="template-path"),
    pytest.param({"generator": {"profile": "nowhere"}}, "nowhere", id="unknown-profile"),
    pytest.param({"embedder": {"model": "/root/.ssh"}}, "embedder.model", id="model-path"),
])
def test_settings_naming_operator_values_are_refused_by_the_generator(stubs, sections, field):
    victim = secret_chunk(stubs, "team-a")
    with pytest.raises(grpc.RpcError) as refused:
        stubs["generator"].Generate(generator_pb2.GenerateRequest(
            kb=KB, query="what is the secret?", sources=[victim], context=with_sections(**sections)))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in refused.value.details()


def test_a_call_without_settings_or_with_another_kbs_is_refused(stubs):
    bare = chunk_pb2.CallContext(tenant=ROOT.tenant)
    other = chunk_pb2.CallContext()
    other.CopyFrom(ROOT)
    other.kb.kb = "another-kb"
    for context, problem in ((bare, f"no settings for knowledge base {KB!r}"),
                             (other, f"no settings for knowledge base {KB!r}")):
        with pytest.raises(grpc.RpcError) as refused:
            stubs["retriever"].Retrieve(retriever_pb2.RetrieveRequest(
                kb=KB, query="secret", filter=chunk_pb2.SearchFilter(namespaces=["team-a"]), context=context))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and problem in refused.value.details()
