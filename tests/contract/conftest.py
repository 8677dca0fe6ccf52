"""Every contract test runs twice: on the embedded backend (SQLite and files under the data directory)
and on the cluster backend (a real PostgreSQL server). Repositories are built the way the services
build them, from `Settings` (`database_url` empty or set)."""

from __future__ import annotations

import pytest

from shared.config import Settings


@pytest.fixture(params=["embedded", pytest.param("postgres", marks=pytest.mark.integration)])
def settings(request, tmp_path) -> Settings:
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else ""
    return Settings(data_dir=tmp_path / "data", database_url=dsn)
