"""Randomized tenant crossing through every REST route: a key of one tenant aimed at the other's data."""

from __future__ import annotations

import random

import httpx
import pytest

from tests.security.conftest import KB, SECRETS

pytestmark = pytest.mark.integration

OTHER = {"team-a": "team-b", "team-b": "team-a"}
KEYS = {"a-writer": "team-a", "b-writer": "team-b", "a-reader": "team-a", "a-kbadmin": "team-a"}
# what an attacker would ask, not knowing the secrets (SECRETS' first words must never come back)
QUESTIONS = {"team-a": "What is the launch code?", "team-b": "What is the payroll figure?"}


@pytest.fixture(scope="module")
def victims(secure_stack):
    """Per namespace: a job id, a trace id and a conversation id its own tenant made."""
    clients, made = secure_stack["clients"], {}
    for key, namespace in (("a-writer", "team-a"), ("b-writer", "team-b")):
        client = clients[key]
        job = client.upload(KB, f"{namespace}-extra.md", f"# Extra\n\n{SECRETS[namespace]} again.\n".encode(),
                            namespace=namespace)["job_id"]
        client.wait([job])
        trace = client.query(KB, SECRETS[namespace])["trace_id"]
        conversation = client._request("POST", "/v1/conversations",
                                       json={"kb": KB, "query": SECRETS[namespace]})["conversation_id"]
        made[namespace] = {"job": job, "trace": trace, "conversation": conversation}
    return made


def routes(target: str, victim: dict) -> list[tuple[str, str, str, dict]]:
    """(label, method, path, request options) for every REST route, aimed at namespace `target`'s data."""
    doc = f"{target}-secret.md"
    return [
        ("list-kbs", "GET", "/v1/knowledge-bases", {}),
        ("get-kb", "GET", f"/v1/knowledge-bases/{KB}", {}),
        ("create-kb", "POST", "/v1/knowledge-bases", {"json": {"name": "crossing-made"}}),
        ("upload", "POST", f"/v1/knowledge-bases/{KB}/documents",
         {"files": {"file": ("planted.md", b"# Planted\n\nplanted\n")}, "data": {"namespace": target}}),
        ("list-docs-target", "GET", f"/v1/knowledge-bases/{KB}/documents", {"params": {"namespace": target}}),
        ("list-docs", "GET", f"/v1/knowledge-bases/{KB}/documents", {}),
        ("delete-doc", "DELETE", f"/v1/knowledge-bases/{KB}/documents/{doc}", {"params": {"namespace": target}}),
        ("list-jobs-target", "GET", f"/v1/knowledge-bases/{KB}/jobs", {"params": {"namespace": target}}),
        ("list-jobs", "GET", f"/v1/knowledge-bases/{KB}/jobs", {}),
        ("get-job", "GET", f"/v1/jobs/{victim['job']}", {}),
        ("cancel-job", "POST", f"/v1/jobs/{victim['job']}/cancel", {}),
        ("retry-job", "POST", f"/v1/jobs/{victim['job']}/retry", {}),
        ("sync", "POST", f"/v1/knowledge-bases/{KB}/sync", {"json": {"namespace": target, "entries": []}}),
        ("reconcile", "POST", f"/v1/knowledge-bases/{KB}/reconcile", {"json": {"namespace": target, "dry_run": True}}),
        ("query-target", "POST", f"/v1/knowledge-bases/{KB}/query",
         {"json": {"query": QUESTIONS[target], "namespaces": [target]}}),
        ("query", "POST", f"/v1/knowledge-bases/{KB}/query", {"json": {"query": QUESTIONS[target]}}),
        ("trace", "GET", f"/v1/traces/{victim['trace']}", {}),
        ("replay", "POST", f"/v1/traces/{victim['trace']}/replay", {}),
        ("conversation-target", "POST", "/v1/conversations",
         {"json": {"kb": KB, "query": QUESTIONS[target], "namespaces": [target]}}),
        ("conversation-stream", "GET", f"/v1/conversations/{victim['conversation']}/stream", {}),
        ("list-keys", "GET", "/v1/admin/keys", {}),
        ("create-key", "POST", "/v1/admin/keys", {"json": {"name": "crossing", "role": "admin", "namespaces": ["*"]}}),
        ("delete-key", "DELETE", "/v1/admin/keys/root", {}),
        ("get-steps", "GET", "/v1/admin/steps", {}),
        ("set-steps", "PUT", "/v1/admin/steps", {"json": {"steps": {}}}),
        ("metrics", "GET", "/metrics", {}),
    ]


# what a crossing attempt may get back (403 also where the role alone forbids the call, before any lookup);
# routes not listed may succeed, on the caller's own data only
REFUSED = {
    "upload": {403}, "list-docs-target": {403}, "delete-doc": {403}, "get-job": {404}, "cancel-job": {403, 404},
    "retry-job": {403, 404}, "sync": {403}, "reconcile": {403}, "query-target": {403}, "trace": {404}, "replay": {404},
    "conversation-target": {403}, "conversation-stream": {404}, "list-keys": {403}, "create-key": {403},
    "delete-key": {403}, "get-steps": {403}, "set-steps": {403}, "list-jobs-target": {200, 403},
}


def test_randomized_tenant_crossing_through_every_rest_route(secure_stack, victims):
    rng = random.Random(1201)
    keys, clients = secure_stack["keys"], secure_stack["clients"]
    calls, leaks, statuses = 0, [], {}
    with httpx.Client(base_url=secure_stack["stack"].http_url, timeout=120) as http:
        for _ in range(16):
            key = rng.choice(sorted(KEYS))
            target = OTHER[KEYS[key]]
            secret = SECRETS[target].split()[0]
            for label, method, path, options in rng.sample(routes(target, victims[target]), 26):
                calls += 1
                response = http.request(method, path, headers={"authorization": f"Bearer {keys[key]}"}, **options)
                statuses.setdefault(label, set()).add(response.status_code)
                # the secret's text, or a document id of the target the caller did not name itself
                if secret in response.text or (f"{target}-" in response.text and label.startswith(("list", "query"))
                                                and label != "list-docs-target"):
                    leaks.append((key, label, response.status_code, response.text[:200]))
    assert calls >= 400 and leaks == [], leaks
    for label, allowed in REFUSED.items():
        assert statuses[label] <= allowed, (label, statuses[label])
    # nothing of the other tenant changed: its documents, jobs and the keys are as they were
    root = clients["root"]
    for namespace in SECRETS:
        documents = {d["doc_id"] for d in root.list_documents(KB, namespace)}
        assert {f"{namespace}-secret.md", f"{namespace}-extra.md"} <= documents and "planted.md" not in documents
        assert root.job(victims[namespace]["job"])["state"] == "done"
    assert {k["name"] for k in root.list_keys()["keys"]} == set(keys)
