"""Memory of this process and of its parse workers, read from /proc (Linux), for benchmarks and tests."""

from __future__ import annotations

import os


def status_mb(pid: int | str, field: str) -> float:
    """A kB field of /proc/<pid>/status (VmRSS, VmHWM, …) in MB; 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def parse_worker_pids() -> list[int]:
    """This process's multiprocessing children (the parse workers; not the Milvus Lite server)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    command = cmdline.read()
            except OSError:
                continue
            if parent == os.getpid() and b"multiprocessing" in command:
                pids.append(int(entry))
    return pids
