"""The images every container test runs, built (or found cached) once per session."""

from __future__ import annotations

import shutil

import pytest

from tests.containers.podman_stack import ROOT, run


@pytest.fixture(scope="session")
def images():
    """scripts/containers/build_images.sh: podman set up, the base, ragkb:latest and the stand-ins.

    Cached by podman's layer cache, so after the first build this only checks that the sources
    have not changed (seconds); scripts/test.sh has usually built them already."""
    if shutil.which("podman-compose") is None:
        pytest.fail("podman-compose is missing: pip install -e '.[dev]'")
    run(["bash", str(ROOT / "scripts" / "containers" / "build_images.sh")], timeout_s=3600)
