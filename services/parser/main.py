"""Run the parser service as its own process: `python -m services.parser.main`."""

from __future__ import annotations

from services.parser import servicer
from services.parser.isolation import ParseWorkers
from shared.config import Settings
from shared.server import ServiceServer, run_service

# Files are read in this many killable worker processes (forked before the parser turns SERVING).
PARSE_WORKERS = 2


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    server = ServiceServer.inner("parser", settings, port=settings.port_of(settings.parser_addr) if port is None else port)
    workers = ParseWorkers(PARSE_WORKERS)
    servicer.add_to(server, workers.read)
    server.add_warm_up(workers.start)
    server.add_closer(workers.close)
    return server


if __name__ == "__main__":
    run_service(build)
