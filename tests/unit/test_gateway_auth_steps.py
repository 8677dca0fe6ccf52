"""API keys, roles and namespaces; deterministic query steps (rewrite, multi-query); ACL group parsing."""

import pytest
import yaml

from services.gateway import auth
from services.gateway.query.preprocess import query_variants, rewrite_query
from shared.contracts import chunk_pb2
from shared.errors import AlreadyExists, InvalidArgument, NotFound, RagkbError
from shared.stores.acl import chunk_groups

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("query, rewritten", [
    pytest.param("Hi, could you please tell me how long the pairing code is valid? Thanks!",
                 "how long the pairing code is valid?", id="en-filler"),
    pytest.param("I want to know the maximum payload", "the maximum payload", id="en-want-to-know"),
    pytest.param("请问，AMR-7 的最大载重是多少？谢谢", "AMR-7 的最大载重是多少？", id="zh-filler"),
    pytest.param("我想知道遥测数据保留多久？？", "遥测数据保留多久？", id="zh-repeated-marks"),
    pytest.param("What is the firmware version?", "What is the firmware version?", id="unchanged"),
    pytest.param("please", "please", id="nothing-left-keeps-query"),
])
def test_rewrite_removes_conversational_filler(query, rewritten):
    assert rewrite_query(query) == rewritten


@pytest.mark.parametrize("query, expected", [
    pytest.param("How do I reset the robot? Where is the charging dock?",
                 ["How do I reset the robot?", "Where is the charging dock?", "reset robot charging dock"],
                 id="en-two-questions"),
    pytest.param("AMR-7 的最大载重是多少？", ["amr 7 最大 载重"], id="zh-keywords"),
    pytest.param("reset", [], id="nothing-new"),
])
def test_multi_query_variants(query, expected):
    variants = query_variants(query)
    assert variants[:len(expected)] == expected if expected else variants == []
    assert len(variants) <= 3 and query not in variants


def keys_file(tmp_path):
    return auth.KeyStore(tmp_path / "keys.yaml")


def test_no_keys_file_means_auth_is_off(tmp_path):
    keys = keys_file(tmp_path)
    assert not keys.enabled
    assert keys.authenticate(None, loopback_peer=True) is auth.OPEN
    assert auth.OPEN.read_namespaces([]) == ["default"] and auth.OPEN.groups is None


def test_keys_are_stored_as_hashes_and_map_to_role_namespaces_and_groups(tmp_path):
    keys = keys_file(tmp_path)
    raw = keys.create("team-a", role="reader", namespaces=["team-a"], groups=["hr"])
    stored = (tmp_path / "keys.yaml").read_text()
    assert raw not in stored and auth.hash_key(raw) in stored
    assert keys.enabled
    principal = keys.authenticate(raw)
    assert (principal.name, principal.role, principal.namespaces, principal.groups) == ("team-a", "reader",
                                                                                        ("team-a",), ("hr",))
    admin = keys.authenticate(keys.create("root", role="admin", namespaces=["*"], groups=["*"]))
    assert admin.namespaces is None and admin.groups is None
    with pytest.raises(auth.Unauthenticated, match="required"):
        keys.authenticate(None)
    with pytest.raises(auth.Unauthenticated, match="not valid"):
        keys.authenticate(raw + "x")
    with pytest.raises(AlreadyExists):
        keys.create("team-a", role="reader", namespaces=["x"])
    keys.delete("team-a")
    with pytest.raises(auth.Unauthenticated):
        keys.authenticate(raw)
    with pytest.raises(NotFound):
        keys.delete("team-a")



def test_a_valid_key_takes_one_store_read_and_a_key_with_no_keys_stored_stays_loopback_only(tmp_path, monkeypatch):
    keys = keys_file(tmp_path)
    stranger = auth.KEY_PREFIX + "never-created"
    assert keys.authenticate(stranger, loopback_peer=True) is auth.OPEN  # no key exists yet: loopback only
    with pytest.raises(auth.Unauthenticated, match="no API keys yet"):
        keys.authenticate(stranger, loopback_peer=False)
    raw = keys.create("team-a", role="reader", namespaces=["team-a"])
    reads: list[str] = []
    entries = type(keys._entries)
    for method in ("any", "find"):
        original = getattr(entries, method)
        monkeypatch.setattr(entries, method, lambda self, *args, _name=method, _original=original:
                            reads.append(_name) or _original(self, *args))
    assert keys.authenticate(raw).name == "team-a"
    assert reads == ["find"]
    with pytest.raises(auth.Unauthenticated, match="not valid"):
        keys.authenticate(stranger, loopback_peer=True)  # once a key exists, loopback needs one too

@pytest.mark.parametrize("entry, message", [
    pytest.param({"name": "x", "role": "owner", "namespaces": ["a"]}, "invalid role 'owner'", id="role"),
    pytest.param({"name": "x y", "role": "reader", "namespaces": ["a"]}, "invalid key name 'x y'", id="name"),
    pytest.param({"name": "x", "role": "reader", "namespaces": []}, "non-empty list of namespaces", id="namespaces"),
])
def test_bad_key_entries_are_refused_naming_the_problem(tmp_path, entry, message):
    with pytest.raises(InvalidArgument, match=message):
        keys_file(tmp_path).create(entry["name"], role=entry["role"], namespaces=entry["namespaces"])


def test_a_broken_keys_file_is_an_error_not_open_access(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [{"name": "a", "role": "reader", "namespaces": ["a"], "sha256": "xyz"}]}))
    with pytest.raises(RagkbError, match="key #1: sha256 must be 64"):
        auth.KeyStore(path)


def test_roles_and_namespaces_are_enforced():
    reader = auth.Principal(name="r", role="reader", namespaces=("a", "b"), groups=())
    reader.require("reader")
    with pytest.raises(auth.PermissionDenied, match="role reader; this needs writer"):
        reader.require("writer")
    assert reader.read_namespaces([]) == ["a", "b"] and reader.read_namespaces(["b"]) == ["b"]
    assert reader.write_namespace("") == "a"
    with pytest.raises(auth.PermissionDenied, match="namespace\\(s\\) c"):
        reader.read_namespaces(["a", "c"])


@pytest.mark.parametrize("method, path, role", [
    pytest.param("GET", "/v1/jobs/1", "reader", id="get"),
    pytest.param("POST", "/v1/knowledge-bases/kb/query", "reader", id="query"),
    pytest.param("POST", "/v1/traces/abc/replay", "reader", id="replay"),
    pytest.param("POST", "/v1/knowledge-bases/budget/documents", "writer", id="upload"),
    pytest.param("DELETE", "/v1/knowledge-bases/kb/documents/x", "writer", id="delete"),
    pytest.param("GET", "/v1/admin/keys", "admin", id="admin"),
])
def test_rest_roles(method, path, role):
    assert auth.required_role(method, path) == role


@pytest.mark.parametrize("method, role", [
    pytest.param("/ragkb.v1.GatewayService/Query", "reader", id="query"),
    pytest.param("/ragkb.v1.GatewayService/ListDocuments", "reader", id="list"),
    pytest.param("/ragkb.v1.GatewayService/IngestDocument", "writer", id="ingest"),
])
def test_grpc_roles(method, role):
    assert auth.grpc_role(method) == role


@pytest.mark.parametrize("raw, groups", [
    pytest.param("hr, finance,hr", ["hr", "finance"], id="dedup"),
    pytest.param("人事，财务", ["人事", "财务"], id="full-width-comma"),
    pytest.param("", [], id="public"),
])
def test_chunk_acl_groups(raw, groups):
    assert chunk_groups(chunk_pb2.KnowledgeChunk(metadata={"acl": raw})) == groups


def test_acl_group_with_a_pipe_is_refused():
    with pytest.raises(InvalidArgument, match="'a|b'"):
        chunk_groups(chunk_pb2.KnowledgeChunk(metadata={"acl": "a|b"}))


def test_keys_cli_creates_lists_and_deletes_keys(tmp_path, capsys):
    from ragkb.cli import main

    path = str(tmp_path / "keys.yaml")
    assert main(["keys", "--keys-file", path, "create", "ops", "--role", "admin", "--namespace", "*"]) == 0
    raw = capsys.readouterr().out.strip()
    assert auth.KeyStore(tmp_path / "keys.yaml").authenticate(raw).role == "admin"
    assert main(["keys", "--keys-file", path, "create", "ops", "--role", "reader", "--namespace", "a"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["keys", "--keys-file", path, "list"]) == 0
    assert "ops" in capsys.readouterr().out and raw not in (tmp_path / "keys.yaml").read_text()
    assert main(["keys", "--keys-file", path, "delete", "ops"]) == 0
    assert not auth.KeyStore(tmp_path / "keys.yaml").enabled
