"""Run the indexer service as its own process: `python -m services.indexer.main`."""

from __future__ import annotations

from services.indexer import servicer
from services.indexer.indexer import Indexer
from services.indexer.reconciler import PeriodicReconciler, Reconciler
from services.indexer.registry import DocumentRegistry
from services.indexer.versions import VersionManager
from shared import components
from shared.config import KBConfig, Settings
from shared.kb import KnowledgeBaseCatalog
from shared.kb_settings import SettingsResolver
from shared.profiles import LiveProfiles
from shared.server import ServiceServer, run_service


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    registry = DocumentRegistry.for_settings(settings)
    stores = components.storage_registry("indexer")
    indexer = Indexer(settings, catalog, registry, stores)
    server = ServiceServer.inner("indexer", settings, port=settings.port_of(settings.indexer_addr) if port is None else port)
    reconciler = Reconciler(indexer, catalog, registry)
    versions = VersionManager(settings, catalog, registry, indexer, reconciler, retention=settings.version_retention)
    servicer.add_to(server, indexer, catalog, registry, reconciler,
                    SettingsResolver(LiveProfiles.for_settings(settings)), versions)
    schedule = PeriodicReconciler(reconciler, catalog, settings.reconcile_interval_s)

    def open_every_kb() -> None:
        """Open each knowledge base's stores before serving (loads their embedders, checks dimensions), and load
        the default embedder even when there is none yet, so creating the first KB does not wait for a model."""
        components.embedder_for(KBConfig(name="default"), stores)
        for name in catalog.names():
            indexer.open_stores(catalog.get(name))

    server.add_warm_up(open_every_kb)
    server.add_warm_up(reconciler.roll_back_interrupted)  # a crash may have left half-written documents
    server.add_warm_up(versions.resume_builds)  # a build the last process did not finish starts again
    server.add_warm_up(schedule.start)
    server.add_closer(schedule.stop)
    server.add_closer(versions.stop)
    server.add_closer(registry.close)
    server.add_closer(indexer.versions.close)
    server.add_closer(indexer.close)
    return server


if __name__ == "__main__":
    run_service(build)
