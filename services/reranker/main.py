"""Run the reranker service as its own process: `python -m services.reranker.main`."""

from __future__ import annotations

from services.reranker import servicer
from services.reranker.rerankers import add_rerankers
from shared import warm_up
from shared.clients import RetrieverClient
from shared.components import storage_registry
from shared.config import Settings
from shared.kb_settings import SettingsResolver
from shared.profiles import LiveProfiles
from shared.registry import ComponentRegistry
from shared.server import ServiceServer, run_service


def components() -> ComponentRegistry:
    """Rerankers and the cross-encoder; the embedder counts the context budget's tokens."""
    return add_rerankers(storage_registry("reranker"))


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    server = ServiceServer.inner("reranker", settings, port=settings.port_of(settings.reranker_addr) if port is None else port)
    # split-part restoration fetches siblings through the retriever, which owns store reads
    retriever = RetrieverClient(settings.retriever_addr, timeout_s=settings.rpc_timeout_s,
                                tls_dir=settings.tls_dir, identity="reranker")
    reranking = servicer.add_to(server, components(), SettingsResolver(LiveProfiles.for_settings(settings)), retriever)

    def warm_default_models() -> None:
        """Rerank the samples under the default KB: loads and runs its reranker and the embedder's tokenizer
        (the context budget), and jieba (MMR's similarity)."""
        for question, passage in warm_up.SAMPLES:
            reranking.rerank(warm_up.default_kb(), question, warm_up.sources(passage))

    server.add_warm_up(warm_default_models)
    server.add_closer(retriever.close)
    return server


if __name__ == "__main__":
    run_service(build)
