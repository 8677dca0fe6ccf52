"""Embedded mode: every service in one process, each still a gRPC server on loopback (and only there).

Services talk through the same servicers and clients as in a cluster; only the
process boundary is gone. With `Settings.in_process_calls` (the default) a client
reaches a service of this process through its handlers and interceptors, without
the loopback hop (shared/inprocess.py); the gRPC servers still serve outside callers. Data lives under `Settings.data_dir` and survives
restarts. `python -m ragkb.embedded` runs it in the foreground until SIGTERM.
"""

from __future__ import annotations

import gc
import json
import logging
import os
from dataclasses import replace

from services.gateway import main as gateway_main
from services.generator import main as generator_main
from services.indexer import main as indexer_main
from services.parser import main as parser_main
from services.reranker import main as reranker_main
from services.retriever import main as retriever_main
from shared import registry
from shared.config import Settings
from shared.server import ServiceServer, is_loopback, run_until_signalled, settle_heap
from shared.stores.milvus import close_clients

log = logging.getLogger("ragkb.embedded")

LAYERS = {
    "parser": parser_main.build,
    "indexer": indexer_main.build,
    "retriever": retriever_main.build,
    "reranker": reranker_main.build,
    "generator": generator_main.build,
}


class EmbeddedStack:
    """Start/stop every service in this process. `ephemeral_ports=True` binds port 0 everywhere (tests)."""

    def __init__(self, settings: Settings, *, ephemeral_ports: bool = False):
        self.settings = settings
        self._ephemeral = ephemeral_ports
        self.servers: dict[str, ServiceServer] = {}
        self.gateway: gateway_main.GatewayProcess | None = None

    def start(self) -> EmbeddedStack:
        if not is_loopback(self.settings.host):
            raise ValueError(f"embedded mode serves on loopback only, not RAGKB_HOST={self.settings.host}; "
                             "run the local stack or a cluster (mTLS between services) to serve other hosts")
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        port = 0 if self._ephemeral else None
        addresses = {}
        for name, build in LAYERS.items():
            server = build(self.settings, port=port)
            server.start()
            if self.settings.in_process_calls:
                server.publish_in_process()
            self.servers[name] = server
            addresses[f"{name}_addr"] = server.address
            # later layers reach earlier ones (the reranker fetches split parts from the retriever)
            self.settings = replace(self.settings, **addresses)
        self.settings = replace(self.settings, **addresses)
        self.gateway = gateway_main.build(self.settings, grpc_port=port, http_port=port)
        self.gateway.start()
        self.servers["gateway"] = self.gateway.grpc
        self.settings = replace(self.settings, gateway_grpc_addr=self.gateway.grpc.address,
                                http_port=self.gateway.http.port)
        for server in self.servers.values():
            server.warm_up()
        settle_heap()
        for server in self.servers.values():
            server.mark_serving()
        self.gateway.resume_jobs()
        return self

    @property
    def http_url(self) -> str:
        return self.gateway.http.url

    def endpoints(self) -> dict[str, str]:
        return {"http": self.http_url, **{name: server.address for name, server in self.servers.items()}}

    def stop(self) -> None:
        """Front door first (stop taking work), then the layers, then the shared stores and models."""
        if self.gateway is not None:
            self.gateway.stop()
        for name, server in reversed(self.servers.items()):
            if name != "gateway":
                server.stop()
        registry.clear_cache()
        close_clients()
        self.servers.clear()
        self.gateway = None
        gc.unfreeze()  # what this stack left behind is the collector's again (settle_heap froze it)


def main() -> None:
    from shared.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings.log_level)
    stack = EmbeddedStack(settings).start()
    state_file = settings.data_dir / "embedded.json"
    state_file.write_text(json.dumps({"pid": os.getpid(), "endpoints": stack.endpoints()}, indent=2))
    log.info("embedded stack ready", extra={"endpoints": stack.endpoints()})
    try:
        run_until_signalled([], on_stop=stack.stop)
    finally:
        state_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
