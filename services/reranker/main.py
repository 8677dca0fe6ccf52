"""Run the reranker service as its own process: `python -m services.reranker.main`."""

from __future__ import annotations

from services.reranker import servicer
from shared.config import Settings
from shared.kb import KnowledgeBaseCatalog
from shared.server import ServiceServer, run_service


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    server = ServiceServer("reranker", host=settings.host,
                           port=settings.port_of(settings.reranker_addr) if port is None else port)
    servicer.add_to(server, KnowledgeBaseCatalog(settings.data_dir))
    return server


if __name__ == "__main__":
    run_service(build)
