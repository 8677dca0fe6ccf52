"""Each probe of the security review, as an attacker with a key (or none) would send it."""

from __future__ import annotations

import logging

import httpx
import pytest
from starlette.testclient import TestClient

from ragkb.client import RagkbApiError
from services.gateway import auth
from services.gateway.api.rest import create_app
from tests.security.conftest import (
    KB,
    SECRETS,
    SERVER_SECRET,
    gateway_without_downstream,
)

pytestmark = pytest.mark.integration


def error_of(response: httpx.Response) -> dict:
    """The one documented error shape: {"error": {"type", "message", "stage"}}."""
    body = response.json()
    assert set(body) == {"error"} and {"type", "message", "stage"} <= set(body["error"]), body
    return body["error"]


# ------------------------------------------------------------------ KB config is tenant input

@pytest.mark.parametrize("config, field", [
    pytest.param("generator: {{name: openai, base_url: '{url}', model: m, api_key_env: RAGKB_TEST_OPERATOR_SECRET}}",
                 "generator.api_key_env", id="secret-to-attacker-url"),
    pytest.param("generator: {{name: openai, base_url: '{url}', model: m}}", "generator.base_url", id="endpoint"),
    pytest.param("generator: {{templates_dir: /etc}}", "generator.templates_dir", id="template-path"),
    pytest.param("vector_store: {{uri: /tmp/elsewhere.db}}", "vector_store.uri", id="store-path"),
    pytest.param("keyword_store: {{name: elasticsearch, hosts: ['{url}']}}", "keyword_store.hosts", id="store-host"),
    pytest.param("embedder: {{model: /tmp}}", "embedder.model", id="model-path"),
    pytest.param("reranker: {{name: bge, model: ../../models}}", "reranker.model", id="reranker-path"),
    pytest.param("generator: {{profile: attacker}}", "profile", id="unknown-profile"),
])
def test_a_kb_config_cannot_name_endpoints_secrets_or_paths(secure_stack, listener, tmp_path, config, field):
    admin = secure_stack["clients"]["root"]
    with pytest.raises(RagkbApiError) as refused:
        admin.create_kb(f"probe-{abs(hash(config)) % 10_000}", config_yaml=config.format(url=listener.url))
    assert refused.value.status == 400 and field in refused.value.message
    assert not listener.saw(SERVER_SECRET) and not (tmp_path / "elsewhere.db").exists()


def test_an_unset_secret_name_is_no_oracle(secure_stack, listener):
    """A set and an unset variable name are refused alike: the answer says nothing about the environment."""
    admin = secure_stack["clients"]["root"]
    answers = []
    for variable in ("RAGKB_TEST_OPERATOR_SECRET", "RAGKB_NO_SUCH_VARIABLE"):
        with pytest.raises(RagkbApiError) as refused:
            admin.create_kb("oracle", config_yaml=f"generator: {{name: openai, api_key_env: {variable}}}")
        answers.append((refused.value.status, refused.value.message.replace(variable, "X")))
    assert answers[0] == answers[1] and answers[0][0] == 400
    assert "not set" not in answers[0][1]


def test_an_operator_profile_sends_its_secret_only_to_its_own_endpoint(secure_stack, listener):
    """The operator names the endpoint and the secret; a KB only picks the profile, and its queries go there."""
    stack, clients = secure_stack["stack"], secure_stack["clients"]
    (stack.settings.data_dir / "profiles.yaml").write_text(
        f"llm: {{vendor: {{base_url: '{listener.url}', model: m, api_key_env: RAGKB_TEST_OPERATOR_SECRET}}}}\n",
        encoding="utf-8")
    try:
        clients["root"].create_kb("profiled", config_yaml="generator: {name: openai, profile: vendor}")
        shown = clients["root"].get_kb("profiled")["config_yaml"]
        assert "profile: vendor" in shown and listener.url not in shown and "api_key_env" not in shown
        clients["root"].upload("profiled", "note.md", b"# Note\n\nThe dock charges in 45 minutes.\n")
    finally:
        (stack.settings.data_dir / "profiles.yaml").unlink()


def test_only_kb_admins_create_knowledge_bases(secure_stack):
    clients = secure_stack["clients"]
    with pytest.raises(RagkbApiError) as denied:
        clients["a-writer"].create_kb("writer-made")
    assert denied.value.status == 403
    assert clients["a-kbadmin"].create_kb("kbadmin-made")["name"] == "kbadmin-made"


def test_listing_shows_counts_of_the_callers_namespaces_only(secure_stack):
    clients = secure_stack["clients"]
    def documents(client: str) -> int:
        return int(next(kb for kb in clients[client].list_kbs() if kb["name"] == KB)["document_count"])

    team_a, team_b = documents("a-writer"), documents("b-writer")
    assert team_a >= 1 and team_b >= 1 and documents("root") == team_a + team_b
    assert next(kb for kb in clients["a-writer"].list_kbs() if kb["name"] == KB)["config_yaml"] == ""
    shown = next(kb for kb in clients["a-kbadmin"].list_kbs() if kb["name"] == KB)["config_yaml"]
    assert "profile: default" in shown and "hosts" not in shown and "uri" not in shown


# ------------------------------------------------------------------ bootstrap without an open door

def test_an_open_instance_mints_no_keys_and_serves_loopback_only(tmp_path):
    app = create_app(gateway_without_downstream(auth.KeyStore(tmp_path / "keys.yaml"), tmp_path))
    # in-process requests that present a loopback and a documentation-range peer address
    local, remote = TestClient(app, client=("127.0.0.1", 5000)), TestClient(app, client=("192.0.2.10", 5000))
    minted = local.post("/v1/admin/keys", json={"name": "me", "role": "admin", "namespaces": ["*"]})
    assert minted.status_code == 403 and "ragkb keys create" in error_of(minted)["message"]
    assert not (tmp_path / "keys.yaml").exists()
    refused = remote.get("/v1/knowledge-bases")
    assert refused.status_code == 401 and "loopback" in error_of(refused)["message"]
    opened = create_app(gateway_without_downstream(auth.KeyStore(tmp_path / "keys.yaml", open_access=True), tmp_path))
    explicit = TestClient(opened, client=("192.0.2.10", 5000))
    assert explicit.get("/v1/admin/keys").status_code == 200  # the operator said so explicitly


# ------------------------------------------------------------------ request hygiene

@pytest.fixture()
def http(secure_stack):
    key = secure_stack["keys"]["a-writer"]
    with httpx.Client(base_url=secure_stack["stack"].http_url, timeout=60,
                      headers={"authorization": f"Bearer {key}"}) as client:
        yield client


@pytest.mark.parametrize("body, status, problem", [
    pytest.param('{"query": "\\ud800 secret"}', 400, "surrogate", id="lone-surrogate"),
    pytest.param('{"query": "a\\u0000b"}', 400, "control character", id="nul"),
    pytest.param('{"query": "ok", "namespaces": ["team-a\\u001b[2J"]}', 400, "control character", id="escape"),
    pytest.param(b'{"query": "\xff\xfe"}', 400, "UTF-8", id="invalid-utf8"),
    pytest.param('{"query": ', 400, "JSON", id="truncated"),
])
def test_bad_strings_are_400_in_the_standard_format(http, body, status, problem):
    response = http.post(f"/v1/knowledge-bases/{KB}/query", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status and problem in error_of(response)["message"]


def test_a_huge_json_body_is_413_before_it_is_read(http):
    response = http.post(f"/v1/knowledge-bases/{KB}/query", content=b'{"query": "' + b"x" * (20 << 20) + b'"}',
                         headers={"content-type": "application/json"})
    assert response.status_code == 413 and error_of(response)["type"] == "PayloadTooLarge"


@pytest.mark.parametrize("method, path, status", [
    pytest.param("GET", "/v1/no-such-route", 404, id="unknown-route"),
    pytest.param("DELETE", "/v1/knowledge-bases", 405, id="wrong-method"),
    pytest.param("GET", f"/v1/knowledge-bases/{KB}/documents?namespace=a%00b", 400, id="nul-in-query"),
    pytest.param("GET", "/v1/jobs/%ED%A0%80", 400, id="surrogate-in-path"),
])
def test_every_error_has_the_standard_body(http, method, path, status):
    response = http.request(method, path)
    assert response.status_code == status
    error_of(response)


def test_a_reader_does_not_see_secrets_of_other_tenants_in_answers(secure_stack):
    answer = secure_stack["clients"]["a-reader"].query(KB, "What is the payroll figure and the launch code?")
    text = str(answer)
    assert SECRETS["team-b"] not in text


def test_a_kb_whose_profile_was_removed_fails_alone_and_says_why(secure_stack):
    stack, root = secure_stack["stack"], secure_stack["clients"]["root"]
    profiles = stack.settings.data_dir / "profiles.yaml"
    profiles.write_text("llm: {retired: {base_url: 'http://127.0.0.1:9/v1', model: m}}\n", encoding="utf-8")
    try:
        root.create_kb("orphaned", config_yaml="generator: {name: openai, profile: retired}")
    finally:
        profiles.unlink()
    assert "orphaned" in {kb["name"] for kb in root.list_kbs()}  # the catalog still lists everything
    with pytest.raises(RagkbApiError) as failed:
        root.query("orphaned", "anything?")
    assert failed.value.status == 412 and "retired" in failed.value.message


def test_logs_hold_ids_not_document_text(secure_stack, caplog):
    caplog.set_level(logging.DEBUG)
    writer = secure_stack["clients"]["a-writer"]
    writer.wait([writer.upload(KB, "logged.md", b"# Logged\n\nThe vault combination is 93-17-44.\n",
                               namespace="team-a")["job_id"]])
    answer = writer.query(KB, "What is the vault combination?")
    assert "93-17-44" in answer["answer"]  # the text was read and answered from
    assert caplog.records and "93-17-44" not in caplog.text


def test_grpc_queries_with_control_characters_are_invalid_argument(secure_stack):
    import grpc

    from shared.contracts import gateway_pb2, gateway_pb2_grpc

    key = secure_stack["keys"]["a-writer"]
    with grpc.insecure_channel(secure_stack["stack"].settings.gateway_grpc_addr) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            gateway_pb2_grpc.GatewayServiceStub(channel).Query(
                gateway_pb2.QueryRequest(kb=KB, query="launch\x00code"), metadata=[("authorization", f"Bearer {key}")],
                timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "control character" in refused.value.details()
