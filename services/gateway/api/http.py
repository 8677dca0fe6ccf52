"""Run the REST app with uvicorn on a background thread, with a real start/stop lifecycle."""

from __future__ import annotations

import threading
import time

import uvicorn


class HttpServer:
    def __init__(self, app, *, host: str, port: int):
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                     access_log=False, lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="gateway-http", daemon=True)
        self.host = host
        self.port: int | None = None

    def start(self, timeout_s: float = 30.0) -> int:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"HTTP server did not start on {self.host}")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
