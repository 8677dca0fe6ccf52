"""One thread per process runs every forward pass of a torch model.

PyPI's torch parallelises each operator with OpenMP, and every thread that calls into it gets an
OpenMP team of its own (`torch.get_num_threads() - 1` workers). Once a process's teams hold more
threads than there are cores, libgomp stops spin-waiting between operators and sleeps and wakes
its workers at every one of them. With all-MiniLM-L6-v2 on 2 cores and 2 torch threads, a SciFact
query took 8.7 ms from the thread that first ran the model and 16 ms from a second thread; once the
retriever's route threads (a pool: their teams live on) had embedded queries, 17 ms from the first
thread as well. The retriever embeds from route threads, the indexer from its callers', the
generator and reranker from RPC threads; here they all hand the pass to one thread, so the process
keeps one team.

Passes were serialised per model already (torch modules are not re-entrant); now they are
serialised across models too, which on a CPU costs little: two concurrent passes would share the
same cores anyway. The hand-off to an idle model thread takes about 12 µs (p50).

A pass that serves one request (`run_for_request`: a query's embedding, its rerank scores, a claim's
verdict) uses the configured intra-op threads only while this process serves one call at a time
(`serving`, entered by every served RPC, network or in-process). With several calls in flight the
other cores run their Python, and a team of two OpenMP threads on two cores shared with it spends
its time waiting at each operator's barrier: 8 concurrent full answers on 2 cores cost 35-38 ms of
CPU each with two threads and 25-29 ms with one. So those passes run single-threaded then; a lone
query keeps both threads (a MiniLM query embedding: 9.5-10.5 ms with two, 12.5 ms with one). Bulk
passes (`run`: ingest batches) keep the configured team: their operators are large enough for two
threads to pay, and the calls beside them mostly wait for the model (single-threaded, 200 documents
ingested at 3.6 instead of 4.4 documents/s).

Between operators, an idle team's workers spin before they sleep (libgomp's default: 300,000
iterations). A process that shares its cores with Elasticsearch, a Milvus server and the other
services spends that spinning on cores they need, so this module makes OpenMP's wait policy
passive by default: a lone MiniLM query embedding then costs ~18 ms of CPU instead of ~27 ms, in
the same wall time (~13 ms on 2 cores), and the local stack's dense route fell from 42-56 to 31-33
ms (README, Performance). libgomp reads the setting once, when torch loads it: this module is
imported by every entry point before any code imports torch (`tests/unit/test_model_thread.py`
checks both). An operator's own `OMP_WAIT_POLICY` is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import TypeVar

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

THREAD_NAME_PREFIX = "model"

T = TypeVar("T")

_executor: futures.ThreadPoolExecutor | None = None
_thread_ident: int | None = None
_lock = threading.Lock()

_serving = 0  # threads inside a call this process serves
_serving_lock = threading.Lock()
_serving_depth = threading.local()  # per thread: calls it is inside (a local call nests in its caller's thread)
_configured_threads: int | None = None  # torch's intra-op threads as configured, read at the first pass
_pass_threads: int | None = None  # what the model thread's passes use now


def run(function: Callable[..., T], *args, **kwargs) -> T:
    """`function(*args, **kwargs)` on the model thread: its result, or its exception raised here.

    Called on the model thread itself (a model's code calling another model), it runs in place."""
    return _run(function, args, kwargs, for_request=False)


def run_for_request(function: Callable[..., T], *args, **kwargs) -> T:
    """`run` for a pass that serves one request: single-threaded while other calls are in flight."""
    return _run(function, args, kwargs, for_request=True)


def _run(function: Callable[..., T], args: tuple, kwargs: dict, *, for_request: bool) -> T:
    if threading.get_ident() == _thread_ident:
        return function(*args, **kwargs)
    return _model_executor().submit(_pass, function, args, kwargs, for_request).result()


@contextlib.contextmanager
def serving() -> Iterator[None]:
    """Marks the calling thread as serving a call while the block runs; nested calls in one thread count once."""
    global _serving
    depth = getattr(_serving_depth, "value", 0)
    _serving_depth.value = depth + 1
    if depth == 0:
        with _serving_lock:
            _serving += 1
    try:
        yield
    finally:
        _serving_depth.value = depth
        if depth == 0:
            with _serving_lock:
                _serving -= 1


def calls_in_flight() -> int:
    """Threads of this process serving a call right now."""
    return _serving


def pass_threads() -> int | None:
    """The intra-op threads the model thread's passes use now (None before the first pass, or without torch)."""
    return _pass_threads


def _pass(function: Callable[..., T], args: tuple, kwargs: dict, for_request: bool) -> T:
    _fit_threads(for_request)
    return function(*args, **kwargs)


def _fit_threads(for_request: bool) -> None:
    """On the model thread, before a pass: one intra-op thread for a request's pass while several calls are in
    flight, else the configured count (a process that never loaded torch has nothing to set)."""
    global _configured_threads, _pass_threads
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if _configured_threads is None:
        _configured_threads = torch.get_num_threads()
    wanted = 1 if for_request and _serving > 1 else _configured_threads
    if wanted != _pass_threads:
        torch.set_num_threads(wanted)
        _pass_threads = wanted


def _model_executor() -> futures.ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME_PREFIX,
                                                   initializer=_remember_thread)
        return _executor


def _remember_thread() -> None:
    global _thread_ident
    _thread_ident = threading.get_ident()


def _forget_after_fork() -> None:
    """A forked child (Celery's prefork pool, the parser's fork server) has no copy of the parent's
    model thread, but would keep its executor, which believes the thread alive and queues forever."""
    global _executor, _thread_ident, _lock, _serving, _serving_lock, _serving_depth, _pass_threads
    _executor, _thread_ident, _lock = None, None, threading.Lock()
    _serving, _serving_lock, _serving_depth = 0, threading.Lock(), threading.local()
    _pass_threads = None  # the parent's configured count stands; its torch may have been left at one thread


os.register_at_fork(after_in_child=_forget_after_fork)
