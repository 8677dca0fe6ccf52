"""Run the indexer service as its own process: `python -m services.indexer.main`."""

from __future__ import annotations

from functools import partial

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
    publish, close_publisher = _reindex_publisher(settings)
    versions = VersionManager(settings, catalog, registry, indexer, reconciler, retention=settings.version_retention,
                              retention_s=settings.version_retention_s, publish=publish)
    servicer.add_to(server, indexer, catalog, registry, reconciler,
                    SettingsResolver(LiveProfiles.for_settings(settings)), versions)
    # each round repairs every complete version (a mirrored write may have failed) and applies version retention
    schedule = PeriodicReconciler(reconciler, catalog, settings.reconcile_interval_s, configs_of=versions.held_configs,
                                  after_round=versions.apply_retention)

    def open_every_kb() -> None:
        """Open each knowledge base's stores before serving (loads their embedders, checks dimensions), and load
        the default embedder even when there is none yet, so creating the first KB does not wait for a model."""
        components.embedder_for(KBConfig(name="default"), stores)
        for name in catalog.names():
            indexer.open_stores(catalog.get(name))

    server.add_warm_up(open_every_kb)
    server.add_warm_up(reconciler.roll_back_interrupted)  # a crash may have left half-written documents
    server.add_warm_up(versions.repair_every_live)  # a switch the last process did not finish is set right
    server.add_warm_up(versions.resume_builds)
    server.add_warm_up(versions.apply_retention)  # a build the last process did not finish starts again
    server.add_warm_up(schedule.start)
    server.add_closer(schedule.stop)
    server.add_closer(versions.stop)
    server.add_closer(registry.close)
    server.add_closer(indexer.versions.close)
    server.add_closer(indexer.close)
    server.add_closer(close_publisher)  # after the builds have stopped: closers run in order
    return server


def _reindex_publisher(settings: Settings):
    """Where a version build sends its re-index jobs, and how to close that: the Celery workers when a broker is
    configured, like ingestion jobs; none (a thread of this process runs them) without one."""
    if not settings.broker_url:
        return None, lambda: None
    from services.worker.celery_app import create_celery
    from services.worker.tasks import publish_reindex

    celery = create_celery(settings)
    return partial(publish_reindex, celery), celery.close


if __name__ == "__main__":
    run_service(build)
