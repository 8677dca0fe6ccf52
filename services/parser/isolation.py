"""Read files in worker processes that can be killed: the per-file timeout, and crash containment.

A thread cannot be stopped, and a native library (pdfminer on a hostile PDF,
tesseract, lxml) can loop, eat memory or segfault. Each read runs in one of
`size` long-lived child processes; a read past its deadline kills its worker, which is
replaced on the next call; a read past its memory limit fails its allocations (RLIMIT_AS)
and ends its worker the same way. unstructured is imported outside the service's process only.

The workers are forked from multiprocessing's fork server, a single-threaded process of its
own (so no locks or threads are inherited), which imports the readers' libraries and reads a
few words of plain text once (fork_template.py). A worker therefore starts warm: the pool's
first start pays for the imports (unstructured, spaCy, the language profiles) once per
process, a replaced worker or another pool of the same process not at all. `start` forks the
whole pool and has each worker read the same few words before the service turns SERVING, so
the first documents of an ingestion never wait for a worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import resource
import sys
import threading

from services.parser import errors
from services.parser.formats import ParsedDocument, ReadOptions

log = logging.getLogger("ragkb.parser")
WARM_UP_TEXT = b"Warm-up.\n\nA few words read once, so that the first file does not pay for the imports.\n"
WARM_UP_TIMEOUT_S = 600.0
# glibc's dynamic loader ends the process with this code when it cannot allocate a library's thread-local data,
# which a worker at its address-space cap can meet instead of a MemoryError (a library's TLS is allocated on
# its first use in a thread, possibly mid-parse); the parse then ran out of its memory budget
LOADER_OUT_OF_MEMORY = 127


def _serve(connection) -> None:
    """Worker loop: (filename, data, options) in, ("ok", document) or ("error", kind, reason, message) out.

    Each file may grow the worker's address space by `options.max_memory_mb` (RLIMIT_AS,
    measured from what the worker holds when the file arrives); past it allocations fail,
    the file is refused with `memory_limit` and the worker exits, to be replaced.
    """
    try:
        _serve_files(connection)
    except (BrokenPipeError, ConnectionResetError):  # the parent is gone
        pass
    # Nothing of a worker outlives it but what it sent. Ending without the interpreter's teardown (module by
    # module through unstructured, spaCy and their dependencies: seconds on 2 cores) keeps the parser's stop short.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve_files(connection) -> None:
    from services.parser import formats, reading

    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if job is None:
            return
        filename, data, options = job
        try:  # the format's libraries are imported first: their size counts against no file's budget
            reading.preload(formats.sniff_type(filename, data))
        except errors.RagkbError:
            pass  # formats.read names the problem below
        limit = _AddressSpaceLimit(options.max_memory_mb)
        try:
            with limit:
                document = formats.read(filename, data, options)
            connection.send(("ok", document))
        except Exception as error:  # never let the loop die on one file
            if isinstance(error, MemoryError) or limit.reached():
                # libraries report a failed allocation in their own words (lxml: "XMLSyntaxError: unknown error")
                del data
                connection.send(("error", "ParseError", errors.MEMORY_LIMIT,
                                 f"{filename!r} needed more than {options.max_memory_mb} MB of memory to parse; "
                                 "the parse was stopped"))
                return  # a failed allocation may have left a library half-way: start afresh
            if isinstance(error, errors.RagkbError):
                connection.send(("error", type(error).__name__, getattr(error, "reason", ""), error.message))
            else:
                connection.send(("error", "ParseError", errors.CORRUPT,
                                 f"{filename!r}: {type(error).__name__}: {str(error)[:200]}"))


class _AddressSpaceLimit:
    """Cap this process's address space at its current size plus `max_memory_mb` inside the block.

    `reached()` tells afterwards whether the block ran into the cap: the peak address space
    (VmPeak) came within a margin of it. A peak already that high before the block (an
    earlier file with a larger budget) cannot be told apart; its worker is then recycled
    only when an allocation fails with MemoryError.
    """

    MARGIN = 32 * 1024 * 1024

    def __init__(self, max_memory_mb: int):
        self.limit = _status_bytes("VmSize") + max_memory_mb * 1024 * 1024
        self._peak_before = _status_bytes("VmPeak")

    def __enter__(self):
        self._saved = resource.getrlimit(resource.RLIMIT_AS)
        hard = self._saved[1]
        if hard != resource.RLIM_INFINITY:
            self.limit = min(self.limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (self.limit, hard))
        return self

    def __exit__(self, *exc) -> None:
        resource.setrlimit(resource.RLIMIT_AS, self._saved)

    def reached(self) -> bool:
        return self._peak_before < self.limit - self.MARGIN <= _status_bytes("VmPeak")


def _status_bytes(field: str) -> int:
    """A kB line of /proc/self/status (VmSize, VmPeak, …) in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


class _Worker:
    def __init__(self, context):
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True, name="ragkb-parse-worker")
        self.process.start()
        child.close()

    def stop(self, *, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            self.ask_to_stop()
        self.finish()

    def ask_to_stop(self) -> None:
        try:
            self.connection.send(None)
        except OSError:
            pass

    def finish(self) -> None:
        """Wait until the worker has ended (killed if it takes more than 5 s), then close its pipe."""
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.connection.close()


class ParseWorkers:
    """A pool of `size` reader processes; `read` blocks until one is free, then enforces `timeout_s`."""

    def __init__(self, size: int = 2):
        if size < 1:
            raise ValueError(f"parse worker pool size must be >= 1, got {size}")
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["services.parser.fork_template"])
        self._size = size
        self._slots = threading.BoundedSemaphore(size)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def read(self, filename: str, data: bytes, options: ReadOptions, timeout_s: float) -> ParsedDocument:
        with self._slots:
            worker = self._take()
            try:
                worker.connection.send((filename, data, options))
                if not worker.connection.poll(timeout_s):
                    log.warning("parse of %r passed %.3g s: worker pid %s killed", filename, timeout_s,
                                worker.process.pid)
                    self._discard(worker)
                    raise errors.ParseTimeout(f"{filename!r} took longer than {timeout_s:g} s to parse; "
                                              "the parse was stopped")
                reply = worker.connection.recv()
            except (EOFError, OSError, BrokenPipeError):
                self._discard(worker)
                code = worker.process.exitcode
                log.error("parse worker died reading %r (exit code %s)", filename, code)
                if code == LOADER_OUT_OF_MEMORY:
                    raise errors.ParseError(errors.MEMORY_LIMIT,
                                            f"{filename!r} needed more than {options.max_memory_mb} MB of memory to "
                                            "parse; the parse was stopped (the parser process ran out of memory "
                                            "for a library's thread-local data)") from None
                raise errors.ParseError(errors.PARSER_CRASHED,
                                        f"the parser process died while reading {filename!r} "
                                        f"(exit code {code}); the file may be malformed or need more than "
                                        f"the {options.max_memory_mb} MB parse memory limit") from None
            if reply[0] == "error" and reply[2] == errors.MEMORY_LIMIT:
                self._discard(worker)  # it exits after a failed allocation
            else:
                self._idle.put(worker)
        if reply[0] == "ok":
            return reply[1]
        _, kind, reason, message = reply
        raise errors.rebuild(kind, reason, message)

    def start(self) -> None:
        """Fork the missing workers of the pool and wait until each has read `WARM_UP_TEXT` once.

        A worker that fails its warm-up is dropped (the next read forks a fresh one)."""
        with self._lock:
            if self._closed:
                return
            spawned = [_Worker(self._context) for _ in range(self._size - len(self._all))]
            self._all.update(spawned)
        for worker in spawned:
            worker.connection.send(("warm-up.txt", WARM_UP_TEXT, ReadOptions()))
        for worker in spawned:
            try:
                ready = worker.connection.poll(WARM_UP_TIMEOUT_S) and worker.connection.recv()[0] == "ok"
            except (EOFError, OSError):
                ready = False
            if ready:
                self._idle.put(worker)
            else:
                log.warning("parse worker pid %s did not warm up; it is replaced on the next read",
                            worker.process.pid)
                self._discard(worker)

    def worker_pids(self) -> list[int]:
        """The live reader processes (for memory measurements)."""
        with self._lock:
            return [worker.process.pid for worker in self._all if worker.process.is_alive()]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._all = list(self._all), set()
        for worker in workers:  # all at once: the workers end side by side
            worker.ask_to_stop()
        for worker in workers:
            worker.finish()

    def _take(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._closed:
                raise errors.Unavailable("the parser is shutting down")
            worker = _Worker(self._context)
            self._all.add(worker)
            return worker

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.stop(kill=True)

