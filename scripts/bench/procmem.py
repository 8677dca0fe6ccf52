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
    """This process's parse workers: the children of its multiprocessing fork server (services/parser/isolation.py),
    and any multiprocessing child of its own besides that server and multiprocessing's resource tracker (not the
    Milvus Lite server either)."""
    processes = []  # (pid, parent, command line)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    command = cmdline.read()
            except OSError:
                continue
            processes.append((int(entry), parent, command))
    mine = [(pid, command) for pid, parent, command in processes
            if parent == os.getpid() and b"multiprocessing" in command
            and b"multiprocessing.resource_tracker" not in command]
    fork_servers = {pid for pid, command in mine if b"multiprocessing.forkserver" in command}
    return [pid for pid, command in mine if pid not in fork_servers] + \
        [pid for pid, parent, _ in processes if parent in fork_servers]
