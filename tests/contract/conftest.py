"""Every contract test runs twice: on the embedded backend (SQLite and files under the data directory)
and on the cluster backend (a real PostgreSQL server). Repositories are built the way the services
build them, from `Settings` (`database_url` empty or set)."""

from __future__ import annotations

import pytest

from shared.config import Settings

MILVUS_SERVER = "http://milvus.example:19530"  # named by the operator's profile; the catalog never connects


@pytest.fixture(params=["embedded", pytest.param("postgres", marks=pytest.mark.integration)])
def settings(request, tmp_path) -> Settings:
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else ""
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(f"vector_store: {{default: {{uri: '{MILVUS_SERVER}'}}, lite: {{}}}}\n", encoding="utf-8")
    return Settings(data_dir=tmp_path / "data", database_url=dsn, profiles_file=str(profiles))
