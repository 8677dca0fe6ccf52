"""In-process calls (embedded mode): the same answers as the loopback gRPC path, and no easier to get.

The stack publishes its services in process (Settings.in_process_calls, on by default); a client
dialling the same server under another target name (`ipv4:<address>`) is not published, so it goes
over gRPC: the two paths are compared on the same servers and data.
"""

import contextlib

import grpc
import pytest

from shared import inprocess, kb_settings, tenancy
from shared.clients import GeneratorClient, RerankerClient, RetrieverClient
from shared.contracts import chunk_pb2, retriever_pb2, retriever_pb2_grpc
from shared.errors import PermissionDenied, Unauthenticated
from shared.kb import KnowledgeBaseCatalog

from .conftest import create_samples_kb

pytestmark = pytest.mark.integration

KB = "inprocess"
QUESTIONS = ["How long does the battery take to charge?", "电池充电需要多长时间？"]
READER = tenancy.operator_tenant("reader-test", namespaces=["default"])


@pytest.fixture(scope="module")
def samples(stack, client):
    create_samples_kb(client, KB)
    return stack


def both(stack, client_class, name: str):
    """A client on the published (in-process) target and one on the same server over gRPC."""
    address = stack.endpoints()[name]
    assert inprocess.service_at(address) is not None, f"{name} is not published in process"
    return client_class(address), client_class(f"ipv4:{address}")


def request(query: str, namespaces=("default",)) -> retriever_pb2.RetrieveRequest:
    return retriever_pb2.RetrieveRequest(kb=KB, query=query, top_k=8,
                                         filter=chunk_pb2.SearchFilter(namespaces=list(namespaces)))


@contextlib.contextmanager
def reading(stack, tenant=READER):
    """Inner calls as the gateway makes them: for `tenant`, carrying the KB's settings."""
    catalog = KnowledgeBaseCatalog.for_settings(stack.settings)
    with tenancy.acting_for(tenant), kb_settings.resolving(KB, lambda: kb_settings.for_catalog(catalog, KB)):
        yield


def wire(message) -> bytes:
    """The message's bytes with its stage timings zeroed, the one part two runs of a query never share."""
    copy = type(message)()
    copy.CopyFrom(message)
    for stage in getattr(copy, "stages", ()):
        stage.ms = 0
    return copy.SerializeToString(deterministic=True)


@pytest.mark.parametrize("question", QUESTIONS)
def test_query_path_answers_are_byte_identical_in_process_and_over_grpc(samples, question):
    retrievers = both(samples, RetrieverClient, "retriever")
    rerankers = both(samples, RerankerClient, "reranker")
    generators = both(samples, GeneratorClient, "generator")
    with reading(samples):
        local, remote = (client.retrieve(request(question)) for client in retrievers)
        assert local.candidates and wire(local) == wire(remote)
        candidates = list(local.candidates)
        local, remote = (client.rerank(KB, question, candidates, top_n=4) for client in rerankers)
        assert local.candidates and wire(local) == wire(remote)
        sources = list(local.candidates)
        local, remote = (client.generate(KB, question, sources) for client in generators)
        assert wire(local) == wire(remote)
    for client in (*retrievers, *rerankers, *generators):
        client.close()


def refusal(call) -> tuple[type, str]:
    with pytest.raises((Unauthenticated, PermissionDenied)) as caught:
        call()
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("tenant", [
    None,  # no tenant context at all
    chunk_pb2.TenantContext(principal="nobody", role="reader"),  # a context naming no namespace
])
def test_calls_without_a_valid_tenant_are_refused_exactly_as_over_grpc(samples, tenant):
    local, remote = both(samples, RetrieverClient, "retriever")

    def call(client):
        with reading(samples, tenant):
            return refusal(lambda: client.retrieve(request(QUESTIONS[0])))

    assert call(local) == call(remote)
    assert call(local)[0] is Unauthenticated
    local.close(), remote.close()


def test_namespaces_outside_the_tenant_are_refused_exactly_as_over_grpc(samples):
    local, remote = both(samples, RetrieverClient, "retriever")
    with reading(samples, tenancy.operator_tenant("team-b-reader", namespaces=["team-b"])):
        refused = [refusal(lambda c=c: c.retrieve(request(QUESTIONS[0], namespaces=["default"])))
                   for c in (local, remote)]
    assert refused[0] == refused[1] and refused[0][0] is PermissionDenied
    local.close(), remote.close()


def test_the_callers_own_tenant_never_reaches_the_service(samples):
    """The handler runs in a fresh context, as in a server thread: a request that carries no tenant is
    refused even while the calling thread acts for an all-namespaces admin."""
    address = samples.endpoints()["retriever"]
    with grpc.insecure_channel(address) as network:
        stub = retriever_pb2_grpc.RetrieverServiceStub(
            inprocess.LocalChannel(inprocess.service_at(address), network))
        with tenancy.acting_for(tenancy.operator_tenant("admin")):
            with pytest.raises(grpc.RpcError) as caught:
                stub.Retrieve(request(QUESTIONS[0]), timeout=30)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "carries no tenant context" in caught.value.details()


def test_the_rest_answer_is_the_same_with_and_without_in_process_calls(samples, client):
    """The whole query path: the same REST answer when the inner services are reached over gRPC."""
    published = {name: inprocess.service_at(address) for name, address in samples.endpoints().items()
                 if inprocess.service_at(address) is not None}
    local = client.query(KB, QUESTIONS[0])
    for name, service in published.items():
        inprocess.withdraw(samples.endpoints()[name], service)
    try:
        remote = client.query(KB, QUESTIONS[0])
    finally:
        for name, service in published.items():
            inprocess.publish(samples.endpoints()[name], service)
    volatile = ("trace_id", "stages")
    assert {k: v for k, v in local.items() if k not in volatile} == \
        {k: v for k, v in remote.items() if k not in volatile}
    assert local["chunks"] and local["answer"]
