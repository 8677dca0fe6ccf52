"""The KB settings inner calls carry: what each service gets, what it refuses, how it resolves and caches them."""

from __future__ import annotations

import json

import pytest

from shared import kb_settings
from shared.config import KBConfig
from shared.contracts import chunk_pb2, gateway_pb2, generator_pb2, retriever_pb2
from shared.errors import FailedPrecondition, InvalidArgument, NotFound
from shared.jobs import JobStore
from shared.kb import KnowledgeBaseCatalog
from shared.profiles import LiveProfiles, OperatorProfiles

pytestmark = pytest.mark.unit

PROFILES = ("keyword_store: {default: {hosts: ['http://es-operator:9200'], index_prefix: op}}\n"
            "vector_store: {default: {uri: 'http://milvus-operator:19530'}}\n"
            "llm: {openai: {base_url: 'https://llm.operator/v1', model: m, api_key_env: OPERATOR_KEY}}\n")
TENANT_YAML = ("generator: {name: openai, profile: openai, refusal_zh: 没有找到。}\n"
               "retriever: {top_k: 4, golden_questions: /srv/golden.jsonl}\n"
               "keyword_store: {name: elasticsearch}\n")


@pytest.fixture
def catalog(tmp_path):
    (tmp_path / "profiles.yaml").write_text(PROFILES, encoding="utf-8")
    catalog = KnowledgeBaseCatalog(tmp_path, tmp_path / "profiles.yaml")
    stored = KBConfig.from_tenant_yaml(TENANT_YAML, name="handbook", profiles=catalog.profiles, operator_tool=True)
    catalog.create("handbook")
    catalog.replace(stored)
    return catalog


def sections(settings: chunk_pb2.KnowledgeBaseSettings) -> dict:
    return json.loads(settings.sections_json)


def test_each_service_gets_only_its_sections_and_never_an_operator_value(catalog):
    settings = kb_settings.for_catalog(catalog, "handbook")
    assert settings.kb == "handbook" and len(settings.version) == 16
    for service, expected in kb_settings.SLICES.items():
        sliced = kb_settings.narrow(settings, service)
        assert set(sections(sliced)) == set(expected) and sliced.version == settings.version
    sent = settings.sections_json
    for operator_value in ("es-operator", "milvus-operator", "llm.operator", "OPERATOR_KEY", "/srv/golden",
                           "hosts", "base_url", "uri", "index_prefix"):
        assert operator_value not in sent
    assert "没有找到。" in sent and sections(settings)["retriever"]["top_k"] == 4


def test_the_version_follows_the_content(catalog):
    before = kb_settings.for_catalog(catalog, "handbook")
    assert kb_settings.for_catalog(catalog, "handbook").version == before.version
    stored = catalog.tenant_config("handbook")
    catalog.replace(stored.model_copy(update={"retriever": stored.retriever.model_copy(update={"top_k": 9})}))
    after = kb_settings.for_catalog(catalog, "handbook")
    assert after.version != before.version and sections(after)["retriever"]["top_k"] == 9


def test_a_missing_kb_is_not_found(catalog):
    with pytest.raises(NotFound, match="nope"):
        kb_settings.for_catalog(catalog, "nope")


def test_a_requests_settings_take_one_catalog_read(catalog, monkeypatch):
    """The gateway resolves them on every query's path: one look at the stored row, not one per question."""
    reads: list[str] = []
    original = type(catalog._rows).stamp
    monkeypatch.setattr(type(catalog._rows), "stamp", lambda self, name: reads.append(name) or original(self, name))
    kb_settings.for_catalog(catalog, "handbook")
    assert reads == ["handbook"]


def test_a_kb_whose_profile_the_operator_removed_is_refused_naming_it(catalog, tmp_path):
    (tmp_path / "profiles.yaml").write_text(PROFILES.replace("llm: {openai:", "llm: {other:"), encoding="utf-8")
    with pytest.raises(FailedPrecondition, match="'handbook' cannot be served.*openai"):
        kb_settings.for_catalog(catalog, "handbook")


def request_for(settings, kb: str = "handbook", service: str = "retriever"):
    request = retriever_pb2.RetrieveRequest(kb=kb, query="q")
    with kb_settings.using(settings):
        kb_settings.attach(request, service)
    return request


def test_settings_are_attached_only_to_requests_about_their_kb(catalog):
    settings = kb_settings.for_catalog(catalog, "handbook")
    assert request_for(settings).context.kb.kb == "handbook"
    assert not request_for(settings, kb="other").context.HasField("kb")
    assert not request_for(None).context.HasField("kb")


def test_settings_are_resolved_once_and_only_when_an_inner_call_needs_them(catalog):
    calls = []

    def resolve():
        calls.append(1)
        return kb_settings.for_catalog(catalog, "handbook")

    with kb_settings.resolving("handbook", resolve):
        other = retriever_pb2.RetrieveRequest(kb="other", query="q")
        kb_settings.attach(other, "retriever")
        assert calls == []
        for service, request in (("retriever", retriever_pb2.RetrieveRequest(kb="handbook")),
                                 ("generator", generator_pb2.GenerateRequest(kb="handbook"))):
            kb_settings.attach(request, service)
            assert set(sections(request.context.kb)) == set(kb_settings.SLICES[service])
    assert calls == [1]


def test_the_receiver_resolves_names_against_its_own_profiles(catalog, tmp_path):
    request = request_for(kb_settings.for_catalog(catalog, "handbook"), service="generator")
    own = tmp_path / "own-profiles.yaml"
    own.write_text("llm: {openai: {base_url: 'https://llm.own/v1', model: own-model}}\n", encoding="utf-8")
    resolver = kb_settings.SettingsResolver(LiveProfiles(own))
    config = resolver.config(request)
    assert config.generator.base_url == "https://llm.own/v1" and config.generator.model == "own-model"
    assert config.generator.refusal_zh == "没有找到。"
    assert resolver.config(request) is config  # cached by content
    own.write_text("llm: {openai: {base_url: 'https://llm.moved/v1', model: own-model}}\n", encoding="utf-8")
    assert resolver.config(request).generator.base_url == "https://llm.moved/v1"  # profiles re-read


@pytest.mark.parametrize("written, problem", [
    pytest.param({"vector_store": {"uri": "http://attacker"}}, "vector_store.uri is an operator setting", id="uri"),
    pytest.param({"generator": {"api_key_file": "/etc/shadow"}}, "generator.api_key_file", id="secret-file"),
    pytest.param({"retriever": {"tuning": None, "gate": None}}, "set by the operator's tools", id="records"),
    pytest.param({"embedder": {"model": "/models/private"}}, "not offered by this server", id="model"),
    pytest.param({"retriever": {"top_k": 0}}, "retriever.top_k", id="out-of-range"),
    pytest.param({"name": "other"}, "must map config sections", id="name"),
    pytest.param(["retriever"], "must map config sections", id="not-a-mapping"),
])
def test_the_receiver_refuses_settings_a_tenant_could_not_write(written, problem):
    request = retriever_pb2.RetrieveRequest(kb="handbook", query="q")
    request.context.kb.kb = "handbook"
    request.context.kb.sections_json = json.dumps(written)
    with pytest.raises(InvalidArgument, match=problem):
        kb_settings.SettingsResolver(LiveProfiles(None)).config(request)


def test_settings_for_another_kb_are_refused(catalog):
    request = request_for(kb_settings.for_catalog(catalog, "handbook"))
    request.kb = "payroll"
    with pytest.raises(InvalidArgument, match="no settings for knowledge base 'payroll'"):
        kb_settings.SettingsResolver(LiveProfiles(None)).config(request)


def test_a_job_keeps_its_settings_and_a_retry_takes_the_ones_given(tmp_path, catalog):
    jobs = JobStore(tmp_path / "jobs")
    try:
        accepted = kb_settings.narrow(kb_settings.for_catalog(catalog, "handbook"), "worker").SerializeToString()
        job = jobs.create(kb="handbook", namespace="default", doc_id="a.md", filename="a.md", content=b"# A\n",
                          kb_settings=accepted)
        assert jobs.kb_settings_of(job.job_id) == accepted
        jobs.update(job.job_id, state=gateway_pb2.JOB_STATE_FAILED)
        kept = jobs.retry(job.job_id)
        assert jobs.kb_settings_of(kept.job_id) == accepted
        jobs.update(kept.job_id, state=gateway_pb2.JOB_STATE_FAILED)
        renewed = jobs.retry(kept.job_id, kb_settings=b"new")
        assert jobs.kb_settings_of(renewed.job_id) == b"new"
    finally:
        jobs.close()


def test_operator_profiles_offer_models_by_name_only(catalog):
    """A model the operator lists travels by its name; the receiver maps it to its own directory."""
    profiles = OperatorProfiles.from_yaml("models: {house-model: /models/house}\n")
    config = KBConfig.from_tenant_yaml("embedder: {model: house-model}", name="handbook", profiles=profiles)
    settings = kb_settings.settings_of(config)
    assert "/models/house" not in settings.sections_json and "house-model" in settings.sections_json
