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
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

THREAD_NAME_PREFIX = "model"

T = TypeVar("T")

_executor: futures.ThreadPoolExecutor | None = None
_thread_ident: int | None = None
_lock = threading.Lock()


def run(function: Callable[..., T], *args, **kwargs) -> T:
    """`function(*args, **kwargs)` on the model thread: its result, or its exception raised here.

    Called on the model thread itself (a model's code calling another model), it runs in place."""
    if threading.get_ident() == _thread_ident:
        return function(*args, **kwargs)
    return _model_executor().submit(function, *args, **kwargs).result()


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
    global _executor, _thread_ident, _lock
    _executor, _thread_ident, _lock = None, None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
