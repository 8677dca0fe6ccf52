"""Real Redis and real Celery worker processes for the ingestion tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.config import Settings
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import engines  # noqa: E402


def start_redis(directory: Path):
    """A real `redis-server` (scripts/engines.py); skipped when missing, except in CI where it must exist."""
    try:
        return engines.start_redis(directory)
    except engines.EngineNotInstalled as error:
        if "CI" in os.environ:
            pytest.fail(str(error))
        pytest.skip(str(error))


class Worker:
    """`python -m services.worker.main` in its own process group, pointed at a running stack."""

    def __init__(self, settings: Settings, log_path: Path):
        env = {key: value for key, value in os.environ.items() if not key.startswith("RAGKB_")}
        env.update({
            "RAGKB_DATA_DIR": str(settings.data_dir),
            "RAGKB_PARSER_ADDR": settings.parser_addr,
            "RAGKB_INDEXER_ADDR": settings.indexer_addr,
            "RAGKB_BROKER_URL": settings.broker_url,
            "RAGKB_WORKER_ADDR": "127.0.0.1:0",
            "RAGKB_INGEST_WORKERS": str(settings.ingest_workers),
            "RAGKB_INGEST_NAMESPACE_SLOTS": str(settings.ingest_namespace_slots),
            "RAGKB_INGEST_STEP_TIMEOUT_S": str(settings.ingest_step_timeout_s),
            "RAGKB_LOG_LEVEL": "INFO",
            "PYTHONPATH": str(ROOT),
        })
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "services.worker.main"], cwd=ROOT, env=env,
                                        stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the whole worker (no chance to acknowledge or clean up)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


def wait_for(predicate, *, timeout_s: float, interval_s: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"{what} not reached within {timeout_s}s")
