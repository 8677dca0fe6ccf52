"""Run the retriever service as its own process: `python -m services.retriever.main`."""

from __future__ import annotations

from services.retriever import servicer
from services.retriever.retriever import Retriever
from shared import components
from shared.config import KBConfig, Settings
from shared.kb_settings import SettingsResolver
from shared.profiles import LiveProfiles
from shared.server import ServiceServer, run_service


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    registry = components.storage_registry("retriever")
    retriever = Retriever(settings, registry)
    server = ServiceServer.inner("retriever", settings, port=settings.port_of(settings.retriever_addr) if port is None else port)
    servicer.add_to(server, retriever, SettingsResolver(LiveProfiles.for_settings(settings)))

    def load_default_embedder() -> None:
        """Load the default embedder before serving, so the first query is not slow (a KB naming another model
        loads it on its first query: the retriever learns each KB's settings from the requests)."""
        components.embedder_for(KBConfig(name="default"), registry)

    server.add_warm_up(load_default_embedder)
    server.add_closer(retriever.close)
    return server


if __name__ == "__main__":
    run_service(build)
