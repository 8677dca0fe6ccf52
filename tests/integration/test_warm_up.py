"""Health says SERVING only once a service's first query loads nothing: each service is built alone in this
process, with the process-wide component cache emptied first, warmed up as `run_service` does, then given its
first request. Counting the cached components shows what that request had to build."""

from __future__ import annotations

from contextlib import closing

import pytest

from services.generator import main as generator_main
from services.reranker import main as reranker_main
from services.retriever import main as retriever_main
from shared import kb_settings, registry, tenancy, warm_up
from shared.clients import GeneratorClient, RerankerClient, RetrieverClient
from shared.config import KBConfig, Settings
from shared.contracts import chunk_pb2, retriever_pb2
from shared.stores.milvus import close_clients

pytestmark = pytest.mark.integration

KB = "first"
MODEL_KINDS = ("embedder", "cross_encoder", "generator", "verifier", "embed_cache")
QUESTION, PASSAGE = "Which dock charges the AMR-7?", "The AMR-7 charges on the DS-2 dock."


def first_retrieve(address: str) -> None:
    with closing(RetrieverClient(address)) as client:
        client.retrieve(retriever_pb2.RetrieveRequest(kb=KB, query=QUESTION,
                                                      filter=chunk_pb2.SearchFilter(namespaces=["default"])))


def first_rerank(address: str) -> None:
    with closing(RerankerClient(address)) as client:
        assert client.rerank(KB, QUESTION, warm_up.sources(PASSAGE, kb=KB)).candidates


def first_generate(address: str) -> None:
    with closing(GeneratorClient(address)) as client:
        assert not client.generate(KB, QUESTION, warm_up.sources(PASSAGE, kb=KB)).refused


@pytest.mark.parametrize("build, first_request, loads", [
    pytest.param(retriever_main.build, first_retrieve, {"embedder"}, id="retriever"),
    pytest.param(reranker_main.build, first_rerank, {"embedder"}, id="reranker"),
    pytest.param(generator_main.build, first_generate, {"embedder", "generator", "embed_cache"}, id="generator"),
])
def test_the_first_request_after_serving_loads_no_model(tmp_path, build, first_request, loads):
    registry.clear_cache()
    server = build(Settings(data_dir=tmp_path / "data"), port=0)
    server.start()
    try:
        server.warm_up()
        server.mark_serving()
        warmed = registry.cached_kinds()
        assert {kind for kind in MODEL_KINDS if warmed[kind]} == loads
        config = KBConfig(name=KB)
        with tenancy.acting_for(tenancy.operator_tenant("probe", namespaces=["default"])), \
                kb_settings.using(kb_settings.settings_of(config)):
            first_request(server.address)
        after = registry.cached_kinds()
        assert {kind: after[kind] for kind in MODEL_KINDS} == {kind: warmed[kind] for kind in MODEL_KINDS}
    finally:
        server.stop()
        registry.clear_cache()
        close_clients()
