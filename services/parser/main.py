"""Run the parser service as its own process: `python -m services.parser.main`."""

from __future__ import annotations

from services.parser import servicer
from shared.config import Settings
from shared.server import ServiceServer, run_service


def build(settings: Settings, *, port: int | None = None) -> ServiceServer:
    server = ServiceServer("parser", host=settings.host,
                           port=settings.port_of(settings.parser_addr) if port is None else port)
    servicer.add_to(server)
    return server


if __name__ == "__main__":
    run_service(build)
