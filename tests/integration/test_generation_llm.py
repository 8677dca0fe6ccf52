"""The OpenAI-compatible chat client against a local server speaking the real protocol (JSON and SSE)."""

from __future__ import annotations

import time

import pytest

from services.generator.answer import Answerer
from services.generator.claims import ClaimChecker
from services.generator.llm import ChatGenerator
from services.generator.openai_client import ChatClient
from services.parser.parser import parse_document
from shared.config import GeneratorConfig
from shared.contracts import chunk_pb2
from shared.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, Unavailable
from tests.chat_standin import ChatStandIn, cite_source_containing
from tests.conftest import LEXICAL_ANSWERABILITY, SAMPLES

pytestmark = pytest.mark.integration

ANSWER = "The dock charges the AMR-7 battery from 20% to 80% in 45 minutes [1]."
MESSAGES = [{"role": "system", "content": "Answer from sources."}, {"role": "user", "content": "How long?"}]


@pytest.fixture(scope="module")
def standin():
    server = ChatStandIn(lambda messages: ANSWER, api_key="sk-test").start()
    yield server
    server.stop()


@pytest.fixture()
def client(standin):
    standin.reset()
    chat = ChatClient(standin.base_url, "standin-model", api_key="sk-test", timeout_s=5,
                      max_retries=2)
    yield chat
    chat.close()


@pytest.fixture(scope="module")
def guide() -> list[chunk_pb2.Candidate]:
    path = SAMPLES / "en" / "amr7-user-guide.md"
    chunks = parse_document(kb="kb", namespace="default", filename=path.name, data=path.read_bytes()).chunks
    return [chunk_pb2.Candidate(chunk=c) for c in chunks]


def test_non_streaming_completion(client, standin):
    assert client.complete(MESSAGES) == ANSWER
    body, headers = standin.requests[0], standin.headers[0]
    assert body["model"] == "standin-model" and body["messages"] == MESSAGES and body["stream"] is False
    assert body["temperature"] == 0.1 and body["max_tokens"] == 800
    assert headers["Authorization"] == "Bearer sk-test"


def test_streaming_completion_yields_the_text_in_pieces(client, standin):
    pieces = list(client.stream(MESSAGES))
    assert len(pieces) > 3 and "".join(pieces) == ANSWER
    assert standin.requests[0]["stream"] is True


@pytest.mark.parametrize("method", ["complete", "stream"])
def test_transient_failures_are_retried(client, standin, method):
    standin.fail_next(503, 429)
    result = client.complete(MESSAGES) if method == "complete" else "".join(client.stream(MESSAGES))
    assert result == ANSWER and len(standin.requests) == 3


def test_retries_give_up_with_the_last_status(client, standin):
    standin.fail_next(503, 503, 503)
    with pytest.raises(Unavailable, match="HTTP 503"):
        client.complete(MESSAGES)
    assert len(standin.requests) == 3


@pytest.mark.parametrize("status, error, message", [
    pytest.param(400, InvalidArgument, "rejected the request", id="400"),
    pytest.param(404, FailedPrecondition, "no model 'standin-model'", id="404"),
])
def test_client_errors_are_not_retried(client, standin, status, error, message):
    standin.fail_next(status)
    with pytest.raises(error, match=message):
        client.complete(MESSAGES)
    assert len(standin.requests) == 1


def test_a_wrong_api_key_is_a_clear_error(standin):
    standin.reset()
    chat = ChatClient(standin.base_url, "m", api_key="sk-wrong", max_retries=2)
    with pytest.raises(FailedPrecondition, match="refused the API key"):
        chat.complete(MESSAGES)
    assert len(standin.requests) == 1
    chat.close()


def test_unreachable_server_and_timeouts():
    with pytest.raises(Unavailable, match="cannot reach"):
        ChatClient("http://127.0.0.1:9/v1", "m", max_retries=0).complete(MESSAGES)
    slow = ChatStandIn(lambda messages: time.sleep(2) or "late").start()
    try:
        with pytest.raises(DeadlineExceeded, match="did not answer in time"):
            ChatClient(slow.base_url, "m", timeout_s=0.3, max_retries=0).complete(MESSAGES)
    finally:
        slow.stop()


def test_chat_generator_prompts_with_numbered_sources_and_checks_claims(standin, guide, monkeypatch):
    standin.reset()
    monkeypatch.setenv("RAGKB_TEST_LLM_KEY", "sk-test")
    charging = next(i for i, s in enumerate(guide, 1) if "45 minutes" in s.chunk.raw_content)
    standin.responder = cite_source_containing(
        "45 minutes", sentence="Charging from 20% to 80% takes 45 minutes [{n}]. The AMR-7 can fly at 200 km/h [{n}].")
    config = GeneratorConfig(name="openai", base_url=standin.base_url, model="standin-model",
                             api_key_env="RAGKB_TEST_LLM_KEY", answerability=LEXICAL_ANSWERABILITY)
    generator = ChatGenerator(config)
    try:
        for stream in (False, True):
            answerer = Answerer("handbook", config, generator, ClaimChecker("lexical"))
            query = "Where do I click to see how long charging takes?"
            if stream:
                events = list(answerer.stream(query, guide))
                assert len(events) > 3 and all(e.WhichOneof("event") == "token" for e in events[:-1])
                response = events[-1].final
                assert "".join(e.token for e in events[:-1]) == standin.responder(standin.requests[-1]["messages"])
            else:
                response = answerer.answer(query, guide)
            assert response.intent == "ui" and not response.refused
            assert [c.verdict for c in response.claim_checks] == ["supported", "flagged"]
            assert [c.number for c in response.citations] == [charging, charging]
            assert any(i.reason == "unsupported_claim" for i in response.citation_issues)
        system, user = standin.requests[0]["messages"]
        assert "product guide" in system["content"] and f"[{charging}]" in user["content"]
        assert [r["stream"] for r in standin.requests] == [False, True]
    finally:
        generator.close()
        standin.responder = lambda messages: ANSWER
