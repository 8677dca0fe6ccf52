"""Generator domain: intent, prompt templates, evidence/refusal, claim-level citation checks.

Chunks are the bundled samples parsed by the real parser; embeddings come from
the shipped all-MiniLM-L6-v2.
"""

from __future__ import annotations

import pytest

from services.generator.answer import Answerer
from services.generator.answerability import decide
from services.generator.claims import ClaimChecker, lexical_support
from services.generator.evidence import read_chunk, select_evidence
from services.generator.extractive import ExtractiveGenerator
from services.generator.openai_client import ChatClient
from services.generator.prompts import PromptBuilder, classify_intent, source_groups
from services.parser.parser import parse_document
from shared import components
from shared.config import GeneratorConfig, KBConfig
from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition, InvalidArgument
from shared.sentences import source_sentences
from tests.conftest import LEXICAL_ANSWERABILITY, SAMPLES

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def guide() -> list[chunk_pb2.Candidate]:
    path = SAMPLES / "en" / "amr7-user-guide.md"
    chunks = parse_document(kb="kb", namespace="default", filename=path.name, data=path.read_bytes()).chunks
    return [chunk_pb2.Candidate(chunk=c) for c in chunks]


@pytest.fixture(scope="module")
def handbook() -> list[chunk_pb2.Candidate]:
    path = SAMPLES / "zh" / "amr7-使用手册.md"
    chunks = parse_document(kb="kb", namespace="default", filename=path.name, data=path.read_bytes()).chunks
    return [chunk_pb2.Candidate(chunk=c) for c in chunks]


@pytest.fixture(scope="module")
def embedder():
    return components.embedder_for(KBConfig(name="kb"))


LEXICAL_GATE = GeneratorConfig(answerability=LEXICAL_ANSWERABILITY)


def number_of(sources: list[chunk_pb2.Candidate], needle: str) -> int:
    return next(i for i, s in enumerate(sources, start=1) if needle in s.chunk.raw_content)


# --- intent ------------------------------------------------------------------------------------

@pytest.mark.parametrize("query, intent", [
    pytest.param("Where do I click to add a robot?", "ui", id="en-where-click"),
    pytest.param("Which menu has the API keys?", "ui", id="en-which-menu"),
    pytest.param("添加机器人的按钮在哪里？", "ui", id="zh-button-where"),
    pytest.param("如何打开地图编辑器", "ui", id="zh-how-open"),
    pytest.param("What is the maximum payload of the AMR-7?", "concept", id="en-concept"),
    pytest.param("磷酸铁锂电池有什么优点？", "concept", id="zh-concept"),
    pytest.param("", "concept", id="empty-falls-back"),
])
def test_intent_classifier(query, intent):
    assert classify_intent(query).name == intent


def test_ui_field_sources_select_the_ui_templates():
    ui = [chunk_pb2.Candidate(chunk=chunk_pb2.KnowledgeChunk(block_type=chunk_pb2.BLOCK_TYPE_UI_FIELD))] * 2
    assert classify_intent("Pairing code", ui).name == "ui"
    assert classify_intent("Pairing code", ui[:1] + [chunk_pb2.Candidate()] * 2).name == "concept"


# --- templates ---------------------------------------------------------------------------------

@pytest.mark.parametrize("intent, language, expected", [
    pytest.param("concept", "en", "Answer in English", id="concept-en"),
    pytest.param("concept", "zh", "用简体中文回答", id="concept-zh"),
    pytest.param("ui", "en", "numbered steps", id="ui-en"),
    pytest.param("ui", "zh", "界面名称", id="ui-zh"),
])
def test_templates_render_role_task_sources_missing_data_and_tone(guide, intent, language, expected):
    sources = guide[:3]
    sources[1].chunk.metadata["part"] = "part 2 of 3"
    system, user = PromptBuilder().messages(kb="handbook", query="How long does charging take?", sources=sources,
                                            intent=intent, language=language, refusal="NO KNOWLEDGE")
    for heading in ("# Role", "# Task", "# How to use the sources", "# When data is missing", "# Tone"):
        assert heading in system["content"]
    assert expected in system["content"] and "reply with exactly: NO KNOWLEDGE" in system["content"]
    body = user["content"]
    assert body.index("[1]") < body.index("[2]") < body.index("[3]") < body.index("# Question")
    assert "(part 2 of 3)" in body and sources[0].chunk.raw_content.strip() in body
    assert body.rstrip().endswith("How long does charging take?")


def test_sources_are_grouped_per_document_with_a_header(guide, handbook):
    groups = source_groups([guide[0], guide[1], handbook[0]])
    assert [len(g["sources"]) for g in groups] == [2, 1]
    assert [s["number"] for g in groups for s in g["sources"]] == [1, 2, 3]
    assert groups[1]["header"] == handbook[0].chunk.source.title


def test_a_kb_can_override_one_template(tmp_path, guide):
    (tmp_path / "concept.md.j2").write_text("# Role\nCustom role for {{ kb }}. Refuse with {{ refusal }}.")
    system, _ = PromptBuilder(str(tmp_path)).messages(kb="hr", query="q", sources=guide[:1], intent="concept",
                                                      language="en", refusal="nothing")
    assert system["content"] == "# Role\nCustom role for hr. Refuse with nothing."
    ui, _ = PromptBuilder(str(tmp_path)).messages(kb="hr", query="q", sources=guide[:1], intent="ui",
                                                  language="en", refusal="nothing")
    assert "product guide" in ui["content"]  # the built-in fills in what the KB does not override


@pytest.mark.parametrize("content, message", [
    pytest.param("{% if %}", "prompt template error", id="syntax-error"),
    pytest.param("{{ no_such_variable }}", "failed to render", id="unknown-variable"),
])
def test_broken_override_is_a_clear_error(tmp_path, guide, content, message):
    (tmp_path / "concept.md.j2").write_text(content)
    with pytest.raises(FailedPrecondition, match=message):
        PromptBuilder(str(tmp_path)).messages(kb="k", query="q", sources=guide[:1], intent="concept",
                                              language="en", refusal="r")


def test_missing_templates_dir_names_it():
    with pytest.raises(FailedPrecondition, match="/no/such/templates"):
        PromptBuilder("/no/such/templates")


# --- evidence and refusal ----------------------------------------------------------------------

@pytest.mark.parametrize("query, sources_fixture, low, high", [
    pytest.param("How long does it take to charge the AMR-7?", "guide", 0.6, 1.0, id="en-answerable"),
    pytest.param("What is the capital of France?", "guide", 0.0, 0.2, id="en-off-topic"),
    pytest.param("AMR-7 的最大载重是多少？", "handbook", 0.6, 1.0, id="zh-answerable"),
    pytest.param("木星有多少颗卫星？", "handbook", 0.0, 0.3, id="zh-off-topic"),
])
def test_evidence_score_separates_answerable_from_off_topic(request, query, sources_fixture, low, high):
    evidence = select_evidence(query, request.getfixturevalue(sources_fixture))
    assert low <= evidence.signals["coverage"] <= high


def test_refusal_verdict_says_why(guide):
    config = LEXICAL_GATE
    empty = decide(config, select_evidence("anything", []), has_sources=False)
    assert empty.refuse and empty.reason == "no sources survived retrieval and reranking"
    off_topic = decide(config, select_evidence("What is the capital of France?", guide), has_sources=True)
    assert off_topic.refuse and "no source sentence shares a content word" in off_topic.reason
    answered = decide(config, select_evidence("What is the maximum payload of the AMR-7?", guide), has_sources=True)
    assert not answered.refuse and "reaches the threshold" in answered.reason


def test_answerer_refuses_weak_evidence_without_generating(guide):
    class Recorder(ExtractiveGenerator):
        calls = 0

        def generate(self, *args, **kwargs):
            Recorder.calls += 1
            return super().generate(*args, **kwargs)

    config = LEXICAL_GATE
    answerer = Answerer("kb", config, Recorder(config), ClaimChecker("lexical"))
    refused = answerer.answer("火星上有多少座火山？", guide)
    assert refused.refused and refused.answer == config.refusal_zh and Recorder.calls == 0
    assert refused.stages[0].metadata["model_called"] == "false"
    assert refused.refusal_reason and refused.answerability.decision == "refuse"
    assert refused.answerability.reason == refused.refusal_reason
    answered = answerer.answer("What is the maximum payload of the AMR-7?", guide)
    assert not answered.refused and Recorder.calls == 1 and "300 kg" in answered.answer
    assert answered.citations and answered.evidence_score >= answered.answerability.threshold
    assert answered.answerability.decision == "answer" and "coverage" in answered.answerability.signals
    steps = {stage.name: stage for stage in answered.stages}
    assert set(steps) == {"generate", "validate_citations", "check_claims", "select_evidence"}
    assert int(steps["select_evidence"].metadata["sentences"]) > 0


def test_a_chunk_is_read_once_per_text_and_again_when_its_text_changes(guide):
    chunk = next(c.chunk for c in guide if "300 kg" in c.chunk.raw_content)
    copy = chunk_pb2.KnowledgeChunk()
    copy.CopyFrom(chunk)
    assert read_chunk(copy) is read_chunk(chunk)
    reading = read_chunk(chunk)
    assert [s.text for s in reading.sentences] == [s for s in source_sentences(chunk) if not s.endswith("?")]
    copy.raw_content = chunk.raw_content.replace("300 kg", "250 kg")
    edited = read_chunk(copy)
    assert edited is not reading and any("250 kg" in s.text for s in edited.sentences)
    assert not any("250 kg" in s.text for s in reading.sentences)


# --- claim-level citation checks ---------------------------------------------------------------

def test_a_correct_claim_is_kept_and_a_fabricated_one_is_flagged(guide, embedder):
    charging, errors = number_of(guide, "45 minutes"), number_of(guide, "| Code")
    answer = (f"The dock charges the battery from 20% to 80% in 45 minutes [{charging}]. "
              f"The AMR-7 can fly at 200 km/h over the warehouse [{errors}].")
    checker = ClaimChecker(embed=embedder.embed_documents, embed_languages=embedder.languages)
    checked = checker.check(answer, guide)
    assert [c.verdict for c in checked.checks] == ["supported", "flagged"]
    assert checked.checks[0].method == "lexical+embedding" and checked.checks[0].semantic > 0
    assert checked.text == answer  # flagged, not removed
    assert [(i.marker, i.reason, i.action) for i in checked.issues] == [
        (f"[{errors}]", "unsupported_claim", "flagged")]


def test_drop_mode_removes_the_unsupported_sentence(guide, embedder):
    payload, speed = number_of(guide, "300 kg"), number_of(guide, "1.8 m/s")
    answer = (f"The maximum payload of the AMR-7 is 300 kg [{payload}]. "
              f"The robot must be repainted every year with blue paint [{speed}].")
    checker = ClaimChecker(action="drop", embed=embedder.embed_documents, embed_languages=embedder.languages)
    checked = checker.check(answer, guide)
    assert checked.text == f"The maximum payload of the AMR-7 is 300 kg [{payload}]."
    assert [c.verdict for c in checked.checks] == ["supported", "dropped"]
    assert checked.issues[0].action == "dropped"


def test_a_number_the_source_never_states_is_not_supported(guide):
    charging = number_of(guide, "45 minutes")
    checked = ClaimChecker("lexical").check(f"The dock charges the battery in 95 minutes [{charging}].", guide)
    assert checked.checks[0].verdict == "flagged"


def test_chinese_claims_are_checked_lexically(handbook, embedder):
    payload, errors = number_of(handbook, "300公斤"), number_of(handbook, "| 代码")
    answer = f"AMR-7 的最大载重为300公斤[{payload}]。机器人每年需要用蓝色油漆重新喷涂[{errors}]。"
    checker = ClaimChecker(embed=embedder.embed_documents, embed_languages=embedder.languages)
    checked = checker.check(answer, handbook)
    assert [(c.verdict, c.method) for c in checked.checks] == [("supported", "lexical"), ("flagged", "lexical")]


def test_sentences_without_markers_are_not_claims(guide):
    checked = ClaimChecker("lexical").check("Here is what the guide says.", guide)
    assert checked.checks == [] and checked.text == "Here is what the guide says."


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"method": "magic"}, "claim_check must be one of", id="method"),
    pytest.param({"action": "delete"}, "unsupported_claims", id="action"),
    pytest.param({"min_support": 2.0}, "min_claim_support", id="threshold"),
    pytest.param({"method": "cross-encoder"}, "needs the bge reranker", id="cross-encoder-without-model"),
])
def test_claim_checker_validates_its_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClaimChecker(**kwargs)


def test_lexical_support_is_a_share_of_the_sentence_terms():
    assert lexical_support("charging takes 45 minutes", "Charging the robot takes 45 minutes.") == 1.0
    assert lexical_support("the", "anything") == 0.0


# --- chat client configuration -----------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    pytest.param({"base_url": "localhost:8000"}, ValueError, "must start with http", id="scheme"),
    pytest.param({"model": ""}, ValueError, "model is empty", id="model"),
    pytest.param({"timeout_s": 0}, ValueError, "timeout_s", id="timeout"),
])
def test_chat_client_validates_its_config(kwargs, error, message):
    arguments = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(error, match=message):
        ChatClient(arguments.pop("base_url"), arguments.pop("model"), **arguments)


@pytest.mark.parametrize("yaml_text, field", [
    pytest.param("generator: {min_evidence_score: 1.5}", "generator.min_evidence_score", id="evidence>1"),
    pytest.param("generator: {claim_check: guess}", "generator.claim_check", id="claim-method"),
    pytest.param("generator: {unsupported_claims: hide}", "generator.unsupported_claims", id="action"),
    pytest.param("generator: {timeout_s: 0}", "generator.timeout_s", id="timeout"),
])
def test_bad_generator_config_names_the_field(yaml_text, field):
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        KBConfig.from_yaml(yaml_text, name="kb")


def test_streamed_answer_ends_with_the_validated_final_event(guide):
    config = LEXICAL_GATE
    answerer = Answerer("kb", config, ExtractiveGenerator(config), ClaimChecker("lexical"))
    events = list(answerer.stream("What is the maximum payload of the AMR-7?", guide))
    tokens = [e.token for e in events if e.WhichOneof("event") == "token"]
    final = events[-1].final
    assert events[-1].WhichOneof("event") == "final" and len(events) == len(tokens) + 1
    assert "".join(tokens) == final.answer and "300 kg" in final.answer and final.citations
    assert [c.verdict for c in final.claim_checks] == ["supported"] * len(final.claim_checks)
    refusal = list(answerer.stream("What is the capital of France?", guide))
    assert [e.WhichOneof("event") for e in refusal] == ["token", "final"] and refusal[-1].final.refused
