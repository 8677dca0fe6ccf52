"""A local (in-process) call carries no more than the wire would: a request or response over the server's
message limit fails with the same status and details as over gRPC."""

from __future__ import annotations

import pytest

from shared import inprocess
from shared.clients import GeneratorClient
from shared.contracts import generator_pb2, generator_pb2_grpc
from shared.errors import RagkbError
from shared.server import MAX_MESSAGE_BYTES, ServiceServer

pytestmark = pytest.mark.unit


class SizedGenerator(generator_pb2_grpc.GeneratorServiceServicer):
    """Answers "ok", or an answer just over the message limit when the query is "oversized"."""

    def Generate(self, request, context):
        answer = "a" * (MAX_MESSAGE_BYTES + 1) if request.query == "oversized" else "ok"
        return generator_pb2.GenerateResponse(answer=answer)


@pytest.fixture(scope="module")
def clients():
    server = ServiceServer("generator", port=0)
    server.add(generator_pb2_grpc.add_GeneratorServiceServicer_to_server, SizedGenerator(),
               "ragkb.v1.GeneratorService")
    server.start()
    server.publish_in_process()
    server.mark_serving()
    assert inprocess.service_at(server.address) is not None
    local, remote = GeneratorClient(server.address, timeout_s=30), GeneratorClient(f"ipv4:{server.address}", timeout_s=30)
    yield local, remote
    local.close(), remote.close()
    server.stop(0)


def refusal(client, query: str) -> str:
    with pytest.raises(RagkbError) as caught:
        client.generate("kb", query, [])
    return str(caught.value)


def test_both_paths_answer_a_request_within_the_limit(clients):
    assert [client.generate("kb", "small", []).answer for client in clients] == ["ok", "ok"]


def test_an_oversized_request_is_refused_locally_as_over_grpc(clients):
    query = "q" * (MAX_MESSAGE_BYTES + 1)
    local, remote = (refusal(client, query) for client in clients)
    assert local == remote
    assert "RESOURCE_EXHAUSTED" in local and "CLIENT: Sent message larger than max" in local


def test_an_oversized_response_is_refused_locally_as_over_grpc(clients):
    local, remote = (refusal(client, "oversized") for client in clients)
    assert local == remote
    assert "RESOURCE_EXHAUSTED" in local and "SERVER: Sent message larger than max" in local
