"""Change detection for config files re-read at run time (keys, step settings, operator profiles, TLS files)."""

from __future__ import annotations

from pathlib import Path


def file_stamp(path: Path) -> tuple | None:
    """What identifies one version of a file: None while it does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino
