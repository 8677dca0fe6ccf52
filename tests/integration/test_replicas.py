"""Per-service scaling: the gateway balances over several retriever replicas and skips a dead one."""

import threading
from dataclasses import replace

import pytest

from ragkb.client import RagkbClient
from services.gateway import main as gateway_main
from services.retriever import main as retriever_main
from services.retriever.retriever import Retriever
from shared.clients import channel_target
from shared.kb import KnowledgeBaseCatalog
from tests.integration.conftest import ingest_folder

pytestmark = pytest.mark.integration

QUESTION = "How long does it take to charge the AMR-7 from 20% to 80%?"


@pytest.mark.unit
@pytest.mark.parametrize("address, target", [
    pytest.param("127.0.0.1:5000", "127.0.0.1:5000", id="single"),
    pytest.param("retriever:50053", "retriever:50053", id="dns-name"),
    pytest.param("10.0.0.1:1, 10.0.0.2:1", "ipv4:10.0.0.1:1,10.0.0.2:1", id="replica-list"),
])
def test_channel_target(address, target):
    assert channel_target(address) == target


@pytest.mark.unit
def test_replica_list_of_names_is_refused_with_advice():
    with pytest.raises(ValueError, match="single DNS name"):
        channel_target("retriever-a:1,retriever-b:1")


def test_queries_survive_losing_a_retriever_replica(stack, client, monkeypatch):
    served_by: list[int] = []
    original = Retriever.retrieve

    def counting_retrieve(self, *args, **kwargs):
        served_by.append(id(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Retriever, "retrieve", counting_retrieve)
    client.create_kb("replicas")
    ingest_folder(client, "replicas")
    replicas = [stack.servers["retriever"]]
    extra = retriever_main.build(stack.settings, port=0)
    extra.start()
    extra.mark_serving()
    replicas.append(extra)
    settings = replace(stack.settings, retriever_addr=",".join(r.address for r in replicas))
    gateway = gateway_main.build(settings, grpc_port=0, http_port=0)
    gateway.start()
    gateway.grpc.mark_serving()
    api = RagkbClient(gateway.http.url)
    answers: list[str] = []
    failures: list[Exception] = []
    halfway = threading.Event()

    def load() -> None:
        for n in range(120):
            if n == 40:
                halfway.set()
            try:
                answers.append(api.query("replicas", QUESTION)["answer"])
            except Exception as error:  # every failure is collected and asserted on below
                failures.append(error)

    worker = threading.Thread(target=load)
    try:
        worker.start()
        assert halfway.wait(timeout=120)
        assert len(set(served_by)) == 2, "both replicas should have taken queries before one dies"
        extra.stop(grace_s=0)  # the replica dies mid-load
        worker.join(timeout=300)
    finally:
        gateway.stop()
        extra.stop(grace_s=0)
    assert failures == []
    assert len(answers) == 120 and all("45 minutes" in a for a in answers)


def test_a_kb_config_change_reaches_every_retriever_replica_on_the_next_query(stack, client, monkeypatch):
    """No restart, no stale cache: each query carries the KB's settings as the catalog holds them now."""
    seen: list[tuple[int, str]] = []  # (replica, fusion it ran with)
    original = Retriever.retrieve

    def recording_retrieve(self, kb, *args, **kwargs):
        seen.append((id(self), kb.retriever.fusion))
        return original(self, kb, *args, **kwargs)

    monkeypatch.setattr(Retriever, "retrieve", recording_retrieve)
    client.create_kb("reconfigured", config_yaml="retriever: {fusion: convex}")
    extra = retriever_main.build(stack.settings, port=0)
    extra.start()
    extra.mark_serving()
    settings = replace(stack.settings,
                       retriever_addr=",".join((stack.servers["retriever"].address, extra.address)))
    gateway = gateway_main.build(settings, grpc_port=0, http_port=0)
    gateway.start()
    gateway.grpc.mark_serving()
    api = RagkbClient(gateway.http.url)
    catalog = KnowledgeBaseCatalog.for_settings(stack.settings)
    try:
        for fusion in ("convex", "rrf", "convex"):
            stored = catalog.tenant_config("reconfigured")
            catalog.replace(stored.model_copy(update={"retriever": stored.retriever.model_copy(
                update={"fusion": fusion})}))
            seen.clear()
            for _ in range(8):
                api.query("reconfigured", QUESTION)
            assert {used for _, used in seen} == {fusion}
            assert len({replica for replica, _ in seen}) == 2
    finally:
        api.close()
        gateway.stop()
        extra.stop(grace_s=0)
