"""Run the generator service as its own process: `python -m services.generator.main`."""

from __future__ import annotations

from services.generator import servicer
from shared.config import Settings
from shared.kb import KnowledgeBaseCatalog
from shared.server import ServiceServer, run_service


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    server = ServiceServer.inner("generator", settings, port=settings.port_of(settings.generator_addr) if port is None else port)
    servicer.add_to(server, KnowledgeBaseCatalog.for_settings(settings))
    return server


if __name__ == "__main__":
    run_service(build)
