"""A keyed embedded stack with two tenants' secrets, and a listener that records what reaches it."""

from __future__ import annotations

import http.server
import threading

import pytest

from ragkb.client import RagkbClient
from ragkb.embedded import EmbeddedStack
from services.gateway.auth import key_store_for
from shared.config import Settings

KB = "vault"
SECRETS = {"team-a": "ALPHA-7731 launch code", "team-b": "BRAVO-4410 payroll figure"}
SERVER_SECRET = "sk-operator-0123456789"  # an operator secret in the server's environment


class Listener:
    """A local HTTP server that records every request (path, headers, body) and answers 200."""

    def __init__(self):
        self.requests: list[dict] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self):
                length = int(self.headers.get("content-length") or 0)
                listener.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": self.rfile.read(length).decode("utf-8", "replace")})
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"choices": [{"message": {"content": "ok"}}]}')

            do_GET = do_POST = _record

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_port}/v1"

    def saw(self, text: str) -> bool:
        return any(text in str(request) for request in self.requests)

    def stop(self) -> None:
        self._server.shutdown()


@pytest.fixture(scope="session")
def listener():
    server = Listener()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory):
    """Keys: root (admin, all), a-writer / b-writer (writer of one namespace), a-kbadmin (kb_admin of team-a),
    a-reader (reader of team-a, ACL group 'hr'). One document per tenant, holding that tenant's secret."""
    import os

    os.environ["RAGKB_TEST_OPERATOR_SECRET"] = SERVER_SECRET
    settings = Settings(data_dir=tmp_path_factory.mktemp("secure"))
    store = key_store_for(settings)
    keys = {"root": store.create("root", role="admin", namespaces=["*"], groups=["*"]),
            "a-writer": store.create("a-writer", role="writer", namespaces=["team-a"]),
            "b-writer": store.create("b-writer", role="writer", namespaces=["team-b"]),
            "a-kbadmin": store.create("a-kbadmin", role="kb_admin", namespaces=["team-a"]),
            "a-reader": store.create("a-reader", role="reader", namespaces=["team-a"], groups=["hr"])}
    stack = EmbeddedStack(settings, ephemeral_ports=True).start()
    clients = {name: RagkbClient(stack.http_url, api_key=key) for name, key in keys.items()}
    clients["root"].create_kb(KB)
    jobs = [clients[f"{ns[-1]}-writer"].upload(KB, f"{ns}-secret.md", f"# Secret of {ns}\n\n{secret}.\n".encode(),
                                               namespace=ns)["job_id"] for ns, secret in SECRETS.items()]
    assert {j["state"] for j in clients["root"].wait(jobs, timeout_s=300)} == {"done"}
    yield {"stack": stack, "keys": keys, "clients": clients}
    for client in clients.values():
        client.close()
    stack.stop()
    os.environ.pop("RAGKB_TEST_OPERATOR_SECRET", None)


def gateway_without_downstream(keys, data_dir):
    """A gateway whose inner services are unreachable: enough for auth and admin routes, which never call them."""
    from services.gateway.gateway import Downstream, Gateway
    from shared.clients import GeneratorClient, IndexerClient, ParserClient, RerankerClient, RetrieverClient
    from shared.jobs import JobStore

    nowhere = "127.0.0.1:9"
    downstream = Downstream(parser=ParserClient(nowhere), indexer=IndexerClient(nowhere),
                            retriever=RetrieverClient(nowhere), reranker=RerankerClient(nowhere),
                            generator=GeneratorClient(nowhere))
    return Gateway(downstream, JobStore(data_dir), queue=None, keys=keys)
