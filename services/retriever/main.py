"""Run the retriever service as its own process: `python -m services.retriever.main`."""

from __future__ import annotations

from services.retriever import servicer
from services.retriever.retriever import Retriever
from shared import components, warm_up
from shared.config import Settings
from shared.kb_settings import SettingsResolver
from shared.profiles import LiveProfiles
from shared.server import ServiceServer, run_service
from shared.text import detect_language, query_terms


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    registry = components.storage_registry("retriever")
    retriever = Retriever(settings, registry)
    server = ServiceServer.inner("retriever", settings, port=settings.port_of(settings.retriever_addr) if port is None else port)
    servicer.add_to(server, retriever, SettingsResolver(LiveProfiles.for_settings(settings)))

    def warm_default_models() -> None:
        """Load and exercise what a default KB's first query needs: the query embedder and jieba (the BM25
        route analyzes the query). A KB naming another model loads it on its first query."""
        embedder = components.embedder_for(warm_up.default_kb(), registry)
        for question, _ in warm_up.SAMPLES:
            embedder.embed_query(question)
            query_terms(question)
            detect_language(question)

    server.add_warm_up(warm_default_models)
    server.add_closer(retriever.close)
    return server


if __name__ == "__main__":
    run_service(build)
