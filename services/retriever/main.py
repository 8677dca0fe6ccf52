"""Run the retriever service as its own process: `python -m services.retriever.main`."""

from __future__ import annotations

from services.retriever import servicer
from services.retriever.retriever import Retriever
from shared import components
from shared.config import Settings
from shared.kb import KnowledgeBaseCatalog
from shared.server import ServiceServer, run_service


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    retriever = Retriever(settings, catalog)
    server = ServiceServer.inner("retriever", settings, port=settings.port_of(settings.retriever_addr) if port is None else port)
    servicer.add_to(server, retriever)

    def load_embedders() -> None:
        """Load each knowledge base's embedder before serving, so the first query is not slow."""
        for name in catalog.names():
            components.embedder_for(catalog.get(name))

    server.add_warm_up(load_embedders)
    server.add_closer(retriever.close)
    return server


if __name__ == "__main__":
    run_service(build)
