"""Shared fixtures. Integration fixtures start real engines and real gRPC servers on 127.0.0.1."""

from __future__ import annotations

import os
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
