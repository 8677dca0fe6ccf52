"""Run the gateway (gRPC + REST) as its own process: `python -m services.gateway.main`.

Ingestion jobs go to Celery workers through Redis when RAGKB_BROKER_URL is set;
otherwise (embedded mode) they run on an in-process queue with the same task code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from services.gateway import auth
from services.gateway.api import servicer
from services.gateway.api.http import HttpServer
from services.gateway.api.rest import create_app
from services.gateway.auth.grpc import AuthInterceptor
from services.gateway.gateway import Downstream, Gateway
from services.gateway.query.preprocess import query_variants
from services.gateway.query.runtime import runtime_from_settings
from services.worker.pipeline import run_ingest_job
from services.worker.queue import CeleryQueue, InProcessQueue, JobQueue
from shared import warm_up
from shared.clients import (
    GeneratorClient,
    IndexerClient,
    ParserClient,
    RerankerClient,
    RetrieverClient,
)
from shared.config import Settings
from shared.jobs import JobStore
from shared.kb import KnowledgeBaseCatalog
from shared.kb_settings import SettingsResolver, for_catalog
from shared.profiles import LiveProfiles
from shared.server import ServiceServer, run_until_signalled, settle_heap
from shared.text import detect_language


@dataclass
class GatewayProcess:
    grpc: ServiceServer
    http: HttpServer
    gateway: Gateway

    def start(self) -> None:
        self.grpc.start()
        self.http.start()

    def resume_jobs(self) -> None:
        """Run the jobs a stopped process left unfinished; only once every service in the process is warm: a
        resumed job would otherwise import the parsing and embedding libraries on its own threads while the
        warm-up imports them, and Python's import-deadlock detection hands one of them a half-initialised
        module (an ImportError that stops the process)."""
        self.gateway.resume_abandoned_jobs()

    def stop(self) -> None:
        self.grpc.stop()
        self.http.stop()


def connect(settings: Settings) -> Downstream:
    options = {"timeout_s": settings.rpc_timeout_s, "tls_dir": settings.tls_dir, "identity": "gateway"}
    return Downstream(
        parser=ParserClient(settings.parser_addr, **options),
        indexer=IndexerClient(settings.indexer_addr, **options),
        retriever=RetrieverClient(settings.retriever_addr, **options),
        reranker=RerankerClient(settings.reranker_addr, **options),
        generator=GeneratorClient(settings.generator_addr, **options),
    )


def job_queue(settings: Settings, downstream: Downstream, jobs: JobStore) -> JobQueue:
    if settings.broker_url:
        return CeleryQueue(settings)
    run_job = partial(run_ingest_job, jobs=jobs, kbs=SettingsResolver(LiveProfiles.for_settings(settings)),
                      parser=downstream.parser, indexer=downstream.indexer,
                      step_timeout_s=settings.ingest_step_timeout_s)
    return InProcessQueue(run_job, jobs, workers=settings.ingest_workers, slots=settings.ingest_namespace_slots)


def warm_query_steps() -> None:
    """Load jieba's dictionary before serving: the optional query steps split and analyze the question."""
    for question, _ in warm_up.SAMPLES:
        detect_language(question)
        query_variants(question)


def build(settings: Settings, *, grpc_port: int | None = None, http_port: int | None = None) -> GatewayProcess:
    downstream = connect(settings)
    jobs = JobStore.for_settings(settings)
    queue = job_queue(settings, downstream, jobs)
    # the gateway resolves each request's KB once and passes every inner service its settings
    knowledge_bases = partial(for_catalog, KnowledgeBaseCatalog.for_settings(settings))
    runtime = runtime_from_settings(settings, retriever=downstream.retriever, reranker=downstream.reranker,
                                    generator=downstream.generator, jobs=jobs, knowledge_bases=knowledge_bases)
    gateway = Gateway(downstream, jobs, queue, runtime=runtime, keys=auth.key_store_for(settings),
                      knowledge_bases=knowledge_bases)
    server = ServiceServer("gateway", host=settings.host,
                           port=settings.port_of(settings.gateway_grpc_addr) if grpc_port is None else grpc_port,
                           interceptors=[AuthInterceptor(gateway.keys)])
    server.add_warm_up(warm_query_steps)
    server.add_closer(runtime.close)
    servicer.add_to(server, gateway)
    server.add_closer(queue.close)
    server.add_closer(jobs.close)
    for client in downstream.all().values():
        server.add_closer(client.close)
    http = HttpServer(create_app(gateway, max_json_bytes=settings.max_json_bytes), host=settings.host,
                      port=settings.http_port if http_port is None else http_port)
    return GatewayProcess(grpc=server, http=http, gateway=gateway)


def main() -> None:
    from shared.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings.log_level)
    process = build(settings)
    process.start()
    process.grpc.warm_up()
    settle_heap()
    process.grpc.mark_serving()
    process.resume_jobs()
    run_until_signalled([process.grpc], on_stop=process.http.stop)


if __name__ == "__main__":
    main()
