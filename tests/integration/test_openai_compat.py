"""The OpenAI-compatible chat endpoint, driven by the official `openai` client against the embedded stack."""

from __future__ import annotations

import openai
import pytest

from tests.integration.conftest import samples_and_reader_keys

pytestmark = pytest.mark.integration

KB = "handbook"
QUESTIONS = [
    pytest.param("How long does it take to charge the AMR-7 from 20% to 80%?", "45 minutes", "en/amr7-user-guide.md",
                 id="en"),
    pytest.param("AMR-7 的最大载重是多少？", "300公斤", "zh/amr7-使用手册.md", id="zh"),
]


@pytest.fixture(scope="module")
def keys(stack, client):
    """The samples, a reader key of their namespace and one of an empty namespace."""
    yield from samples_and_reader_keys(stack, client, KB, "oa")


def openai_client(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def reader(stack, keys):
    with openai_client(stack, keys["reader"]) as api:
        yield api


def test_models_are_the_knowledge_bases(reader):
    assert KB in [model.id for model in reader.models.list()]
    assert reader.models.retrieve(KB).owned_by == "ragkb"


@pytest.mark.parametrize(("question", "answer", "doc_id"), QUESTIONS)
def test_completion_cites_in_the_text_and_in_the_extra_field(reader, question, answer, doc_id):
    response = reader.chat.completions.create(
        model=KB, temperature=0.2, messages=[{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": question}])
    (choice,) = response.choices
    text = choice.message.content
    assert choice.finish_reason == "stop" and choice.message.role == "assistant" and response.model == KB
    citations = response.model_extra["citations"]
    supporting = [c for c in citations if answer in c["quote"]]
    assert supporting and all(c["doc_id"] == doc_id for c in supporting)
    answer_text, sources = text.split("\n\nSources:\n")
    assert answer in answer_text and f"[{supporting[0]['number']}]" in answer_text
    assert f"[{supporting[0]['number']}] {doc_id}" in sources
    extra = response.model_extra["ragkb"]
    assert not extra["refused"] and extra["trace_id"] and response.id == f"chatcmpl-{extra['trace_id']}"


@pytest.mark.parametrize(("question", "answer", "doc_id"), QUESTIONS)
def test_streamed_completion_has_the_answer_then_sources_then_citations(reader, question, answer, doc_id):
    stream = reader.chat.completions.create(model=KB, stream=True,
                                            messages=[{"role": "user", "content": [
                                                {"type": "text", "text": question},
                                                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}])
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and {c.object for c in chunks} == {"chat.completion.chunk"}
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks].count("stop") == 1 and chunks[-1].choices[0].finish_reason
    citations = chunks[-1].model_extra["citations"]
    assert any(answer in c["quote"] and c["doc_id"] == doc_id for c in citations)
    answer_text, sources = text.split("\n\nSources:\n")
    assert answer in answer_text and doc_id in sources
    assert answer in chunks[-1].model_extra["ragkb"]["answer"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_key_of_another_namespace_gets_a_refusal_with_its_reason(stack, keys, stream):
    with openai_client(stack, keys["elsewhere"]) as other:
        question = [{"role": "user", "content": "How long does it take to charge the AMR-7 from 20% to 80%?"}]
        if stream:
            chunks = list(other.chat.completions.create(model=KB, messages=question, stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks)
            final = chunks[-1].model_extra
        else:
            response = other.chat.completions.create(model=KB, messages=question)
            text, final = response.choices[0].message.content, response.model_extra
    assert final["ragkb"]["refused"] and final["ragkb"]["refusal_reason"]
    assert final["citations"] == [] and text and "45 minutes" not in text and "Sources:" not in text


def test_errors_have_openai_bodies(stack, reader):
    with pytest.raises(openai.NotFoundError) as unknown:
        reader.chat.completions.create(model="no-such-kb", messages=[{"role": "user", "content": "hi"}])
    assert unknown.value.code == "model_not_found" and "no-such-kb" in unknown.value.message
    assert unknown.value.body["type"] == "not_found_error"
    with pytest.raises(openai.BadRequestError) as no_user:
        reader.chat.completions.create(model=KB, messages=[{"role": "system", "content": "hi"}])
    assert no_user.value.body["type"] == "invalid_request_error" and "role 'user'" in no_user.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        reader.chat.completions.create(model=KB, messages=[])
    assert "messages" in empty.value.message
    with pytest.raises(openai.BadRequestError) as control:  # refused by the request-hygiene middleware
        reader.chat.completions.create(model=KB, messages=[{"role": "user", "content": "hi\x00"}])
    assert control.value.body["type"] == "invalid_request_error" and "U+0000" in control.value.message
    with pytest.raises(openai.PermissionDeniedError) as outside:
        reader.chat.completions.create(model=KB, messages=[{"role": "user", "content": "hi"}],
                                       extra_body={"namespaces": ["elsewhere"]})
    assert outside.value.body["type"] == "permission_error" and "elsewhere" in outside.value.message
    with openai_client(stack, "rk_not-a-key") as stranger, pytest.raises(openai.AuthenticationError) as denied:
        stranger.models.list()
    assert denied.value.body["type"] == "authentication_error" and denied.value.code == "unauthenticated"
