"""The shared server interceptor translates errors of server-streaming calls, before and after the first
message, so servicers raise the project's errors and never translate them by hand."""

from __future__ import annotations

import pytest

from shared.clients import GeneratorClient
from shared.contracts import generator_pb2, generator_pb2_grpc
from shared.errors import NotFound, RagkbError
from shared.server import ServiceServer

pytestmark = pytest.mark.unit


class FailingGenerator(generator_pb2_grpc.GeneratorServiceServicer):
    """`query` says how the stream fails: at once, after one token, or with an unexpected exception."""

    def GenerateStream(self, request, context):
        if request.query == "at once":
            raise NotFound("knowledge base 'gone' does not exist")
        yield generator_pb2.GenerateEvent(token="first ")
        if request.query == "after one":
            raise NotFound("chunk 'c1' disappeared mid-answer")
        if request.query == "bug":
            raise KeyError("internal detail")
        yield generator_pb2.GenerateEvent(token="second")


@pytest.fixture(scope="module")
def client():
    server = ServiceServer("generator", port=0)
    server.add(generator_pb2_grpc.add_GeneratorServiceServicer_to_server, FailingGenerator(),
               "ragkb.v1.GeneratorService")
    server.start()
    server.mark_serving()
    client = GeneratorClient(server.address, timeout_s=10)
    yield client
    client.close()
    server.stop(0)


def test_a_stream_that_fails_before_its_first_message_carries_the_error_kind(client):
    with pytest.raises(NotFound, match="'gone' does not exist"):
        list(client.generate_stream("kb", "at once", []))


def test_a_stream_that_fails_after_a_message_carries_the_error_kind(client):
    received = []
    with pytest.raises(NotFound, match="disappeared mid-answer"):
        for event in client.generate_stream("kb", "after one", []):
            received.append(event.token)
    assert received == ["first "]


def test_an_unexpected_failure_in_a_stream_is_internal_and_named(client):
    with pytest.raises(RagkbError, match="GenerateStream: KeyError") as failure:
        list(client.generate_stream("kb", "bug", []))
    assert failure.value.code.name == "INTERNAL"


def test_a_stream_that_succeeds_is_untouched(client):
    assert [e.token for e in client.generate_stream("kb", "fine", [])] == ["first ", "second"]
