"""A replica stopped in the middle of an idempotent call costs the caller nothing: the call is retried."""

import threading
from concurrent import futures

import grpc
import pytest

from shared.clients import RetrieverClient
from shared.contracts import retriever_pb2, retriever_pb2_grpc
from shared.errors import NotFound


class _Replica(retriever_pb2_grpc.RetrieverServiceServicer):
    """A real gRPC retriever endpoint: answers at once, holds every call until it is stopped, cancels every
    call from its side, or refuses every call as NOT_FOUND."""

    def __init__(self, name: str, *, holds_calls: bool = False, cancels_calls: bool = False,
                 missing: bool = False):
        self.name = name
        self.holds_calls = holds_calls
        self.cancels_calls = cancels_calls
        self.missing = missing
        self.calls = 0
        self.entered = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        retriever_pb2_grpc.add_RetrieverServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Retrieve(self, request, context):
        self.calls += 1
        if self.missing:
            context.abort(grpc.StatusCode.NOT_FOUND, f"knowledge base {request.kb!r} not found")
        if self.cancels_calls:
            context.cancel()
            return retriever_pb2.RetrieveResponse(query_language="never delivered")
        if self.holds_calls:
            self.entered.set()
            threading.Event().wait(30)  # released only by the server stopping under it
        return retriever_pb2.RetrieveResponse(query_language=self.name)


@pytest.fixture
def replicas():
    started: list[_Replica] = []
    yield started
    for replica in started:
        replica.server.stop(0)


def test_a_call_its_replica_cancels_while_stopping_is_answered_by_the_other(replicas):
    holding, answering = _Replica("holding", holds_calls=True), _Replica("answering")
    replicas += [holding, answering]
    client = RetrieverClient(f"127.0.0.1:{holding.port},127.0.0.1:{answering.port}", timeout_s=20)
    answered: list[str] = []
    try:
        # round robin sends one of any few calls to the holding replica; stop it while it holds that call
        for _ in range(10):
            call = threading.Thread(target=lambda: answered.extend(
                [client.retrieve(retriever_pb2.RetrieveRequest(kb="kb", query="q")).query_language]))
            call.start()
            if holding.entered.wait(timeout=2):
                holding.server.stop(0)
                call.join(timeout=20)
                break
            call.join(timeout=20)
        assert holding.entered.is_set(), "no call reached the holding replica"
        assert holding.calls == 1
        assert answered and set(answered) == {"answering"}
    finally:
        client.close()


def test_a_call_the_server_cancels_is_retried_on_the_next_replica(replicas):
    """A stopping server resets its open streams and sends GOAWAY; whichever reaches the caller first decides
    whether it sees UNAVAILABLE or CANCELLED. Both mean the call was dropped, not refused."""
    cancelling, answering = _Replica("cancelling", cancels_calls=True), _Replica("answering")
    replicas += [cancelling, answering]
    client = RetrieverClient(f"127.0.0.1:{cancelling.port},127.0.0.1:{answering.port}", timeout_s=20)
    try:
        answers = [client.retrieve(retriever_pb2.RetrieveRequest(kb="kb", query="q")).query_language
                   for _ in range(6)]
        assert set(answers) == {"answering"}
        assert cancelling.calls >= 1, "round robin should have sent some first attempts to the cancelling replica"
    finally:
        client.close()


def test_an_error_the_server_meant_is_not_retried(replicas):
    refusing = _Replica("refusing", missing=True)
    replicas.append(refusing)
    client = RetrieverClient(f"127.0.0.1:{refusing.port}", timeout_s=10)
    try:
        with pytest.raises(NotFound, match="not found"):
            client.retrieve(retriever_pb2.RetrieveRequest(kb="absent", query="q"))
        assert refusing.calls == 1
    finally:
        client.close()
