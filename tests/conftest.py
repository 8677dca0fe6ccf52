"""Shared fixtures. Integration fixtures start real engines and real gRPC servers on 127.0.0.1."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SHARED_DATA = ROOT.parent / "shared" / "data"

# The shipped answerability defaults lean on retrieval scores (dense cosine, BM25) that bare parsed
# chunks handed straight to the generator do not carry; such tests gate on the lexical signals alone.
LEXICAL_ANSWERABILITY = {"en": {"features": ["coverage", "span_coverage"], "weights": [6.0, 2.0], "bias": -4.0,
                                "threshold": 0.5}}

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data; fails in CI (RAGKB_REQUIRE_SHARED_DATA=1) and skips elsewhere when missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        message = f"shared data missing: {path}"
        if os.environ.get("RAGKB_REQUIRE_SHARED_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch):
    """No test sees another's RAGKB_* settings."""
    for key in list(os.environ):
        if key.startswith("RAGKB_") and key != "RAGKB_REQUIRE_SHARED_DATA":
            monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL 15 server (Debian package, scripts/engines.py) on 127.0.0.1 for the session."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import engines

    try:
        server = engines.start_postgres()
    except engines.EngineNotInstalled as error:
        if "CI" in os.environ:
            pytest.fail(str(error))
        pytest.skip(str(error))
    yield server
    server.stop()


@pytest.fixture
def postgres_dsn(postgres_server):
    """A fresh, empty database on the session's server; dropped after the test."""
    import psycopg

    from shared.state.postgres import close_database

    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    dsn = f"{postgres_server.dsn.rsplit('/', 1)[0]}/{name}"
    yield dsn
    close_database(dsn)
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
