"""The one gRPC server helper every service uses.

It provides: the standard health service with real state (NOT_SERVING until the
service says it is ready, NOT_SERVING again as soon as shutdown starts), server
reflection, an interceptor that logs each call (unary or server-streaming), rejects
calls whose deadline has already passed and turns the project's exceptions into gRPC
status codes, and a graceful stop on SIGTERM/SIGINT.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import logging
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from shared.errors import ERROR_KIND_KEY, RagkbError
from shared import inprocess, model_thread
from shared.inprocess import HandlerRecorder, LocalService

log = logging.getLogger("ragkb.server")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


class ServiceInterceptor(grpc.ServerInterceptor):
    """Logging, deadline and error translation for unary calls and server streams alike, so servicers
    raise the project's errors and never translate them by hand."""

    def __init__(self, service_name: str):
        self._service_name = service_name

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            def unary(request, context: grpc.ServicerContext):
                with self._translated(method, context):
                    return inner(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                                       response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            def stream(request, context: grpc.ServicerContext):
                with self._translated(method, context):
                    yield from inner_stream(request, context)

            return grpc.unary_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                        response_serializer=handler.response_serializer)
        return handler

    @contextlib.contextmanager
    def _translated(self, method: str, context: grpc.ServicerContext) -> Iterator[None]:
        """Run one call: refuse it when its deadline has passed, map errors to status codes, log the outcome.

        For a stream the block spans the whole iteration, so an error after the first message is
        translated too; a caller that goes away mid-stream closes it (logged as CANCELLED)."""
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                code = grpc.StatusCode.DEADLINE_EXCEEDED
                context.abort(code, f"{method}: deadline passed before the call started")
            with model_thread.serving():  # how many calls run at once decides a pass's torch threads
                yield
        except RagkbError as error:
            code = error.code
            context.set_trailing_metadata(((ERROR_KIND_KEY, type(error).__name__),))
            context.abort(error.code, str(error))
        except GeneratorExit:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as error:  # grpc's own abort raises a bare Exception too
            if context.code() not in (None, grpc.StatusCode.OK):
                code = context.code()
                raise
            code = grpc.StatusCode.INTERNAL
            log.error("%s failed: %s", method, traceback.format_exc())
            context.abort(grpc.StatusCode.INTERNAL, f"{method}: {type(error).__name__}: {error}")
        finally:
            log.info(
                "rpc", extra={"service": self._service_name, "method": method, "code": code.name,
                              "ms": round((time.perf_counter() - started) * 1000, 2)},
            )


SCOPED_PREFIX = "/ragkb."  # the project's own services; health and reflection stay open for probes


def run_admitted(handler: grpc.RpcMethodHandler, admit: Callable[[Any, grpc.ServicerContext], Any]):
    """`handler` with each call run inside the context manager `admit(request, context)` returns.

    `admit` checks the caller and raises the project's errors to refuse it; `ServiceInterceptor`
    (outermost) translates them, for unary calls and streams alike.
    """
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        def unary(request, context):
            with admit(request, context):
                return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)
    if handler.unary_stream is not None:
        inner_stream = handler.unary_stream

        def stream(request, context):
            with admit(request, context):
                yield from inner_stream(request, context)

        return grpc.unary_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                    response_serializer=handler.response_serializer)
    return handler


class ServiceServer:
    """A gRPC server for one service, with health, reflection and graceful stop.

    Usage: add servicers, `start()`, finish warm-up (load models, open stores),
    then `mark_serving()`. Health stays NOT_SERVING until then.
    """

    def __init__(self, name: str, *, host: str = "127.0.0.1", port: int = 0, max_workers: int = 16,
                 grace_s: float = 5.0, interceptors: Sequence[grpc.ServerInterceptor] = (),
                 tls_dir: str = "", plaintext_off_loopback: bool = True):
        self.name = name
        self._host = host
        self._requested_port = port
        self._tls_dir = tls_dir
        self._plaintext_off_loopback = plaintext_off_loopback
        self._grace_s = grace_s
        # error translation outermost, so errors raised by inner interceptors (auth) map to status codes too
        self._interceptors = (ServiceInterceptor(name), *interceptors)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"{name}-rpc"),
            interceptors=self._interceptors, options=SERVER_OPTIONS,
        )
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}  # the project's methods, for in-process calls
        self._local: LocalService | None = None
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        self._service_names: list[str] = []
        self.port: int | None = None
        self._stopped = threading.Event()
        self._warm_ups: list[Callable[[], None]] = []
        self._closers: list[Callable[[], None]] = []

    @classmethod
    def inner(cls, name: str, settings, *, port: int, **options) -> ServiceServer:
        """An inner service: every call needs a tenant context; with `settings.tls_dir` it serves mutual TLS
        to the callers `shared.tls.CALLERS` names, else plaintext on loopback only (unless insecure_inner)."""
        from shared.tenancy import TenantInterceptor
        from shared.tls import CALLERS

        allowed = CALLERS[name] if settings.tls_dir else None
        return cls(name, host=settings.host, port=port, tls_dir=settings.tls_dir,
                   plaintext_off_loopback=settings.insecure_inner,
                   interceptors=[TenantInterceptor(name, allowed)], **options)

    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.name}: server not started")
        return f"{self._host}:{self.port}"

    def add(self, register: Callable[[Any, grpc.Server], None], servicer: Any, full_name: str) -> None:
        """Register a servicer, e.g. `add(add_ParserServiceServicer_to_server, impl, "ragkb.v1.ParserService")`."""
        register(servicer, HandlerRecorder(self._server, self._handlers))
        self._service_names.append(full_name)

    def publish_in_process(self) -> None:
        """Serve callers in this process without the loopback hop (shared/inprocess.py), after `start()`;
        `stop()` withdraws it and waits for the local calls in flight as for the network ones."""
        self._local = LocalService(self.name, dict(self._handlers), self._interceptors,
                                   max_message_bytes=MAX_MESSAGE_BYTES)
        inprocess.publish(self.address, self._local)

    def add_warm_up(self, step: Callable[[], None]) -> None:
        """Work to finish after start and before SERVING (load models, open stores)."""
        self._warm_ups.append(step)

    def add_closer(self, close: Callable[[], None]) -> None:
        """Resources to release after the server has stopped (databases, pools)."""
        self._closers.append(close)

    def warm_up(self) -> None:
        for step in self._warm_ups:
            step()

    def start(self) -> int:
        names = [*self._service_names, health.SERVICE_NAME, reflection.SERVICE_NAME]
        reflection.enable_server_reflection(names, self._server)
        self._set_status(health_pb2.HealthCheckResponse.NOT_SERVING)
        bind = f"{self._host}:{self._requested_port}"
        if self._tls_dir:
            from shared.tls import server_credentials

            self.port = self._server.add_secure_port(bind, server_credentials(self._tls_dir, self.name))
        elif is_loopback(self._host) or self._plaintext_off_loopback:
            self.port = self._server.add_insecure_port(bind)
        else:
            raise RuntimeError(f"{self.name}: refusing plaintext gRPC on {self._host}, which is not a loopback "
                               "address: set RAGKB_TLS_DIR (see `ragkb certs init`) or bind 127.0.0.1")
        if self.port == 0:
            raise RuntimeError(f"{self.name}: could not bind {self._host}:{self._requested_port}")
        self._server.start()
        log.info("%s listening on %s", self.name, self.address)
        return self.port

    def mark_serving(self) -> None:
        self._set_status(health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace_s: float | None = None) -> None:
        """Flip health to NOT_SERVING first, so balancers drain, then stop accepting calls."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._health.enter_graceful_shutdown()
        grace_s = self._grace_s if grace_s is None else grace_s
        if self._local is not None:
            inprocess.withdraw(self.address, self._local)
            self._local.close(grace_s)
        self._server.stop(grace_s).wait()
        for close in self._closers:
            close()
        log.info("%s stopped", self.name)

    def wait(self) -> None:
        self._server.wait_for_termination()

    def _set_status(self, status: int) -> None:
        self._health.set("", status)
        for name in self._service_names:
            self._health.set(name, status)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def settle_heap() -> None:
    """Once warm-up is done: collect, then move every object alive (models, tokenizers, modules, caches
    filled by the warm-up) out of the collector's reach (`gc.freeze`). A full collection otherwise walks
    those millions of long-lived objects again and again, a pause of tens of milliseconds that lands on
    whichever query allocates at that moment. Refcounting still frees them; `gc.unfreeze` (a stack that
    stops inside a longer-lived process) hands them back to the collector."""
    gc.collect()
    gc.freeze()


def run_until_signalled(servers: list[ServiceServer], on_stop: Callable[[], None] | None = None) -> None:
    """Block until SIGTERM/SIGINT, then stop every server gracefully (main thread only)."""
    done = threading.Event()

    def handle(signum, _frame):
        log.info("received %s, shutting down", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    done.wait()
    for server in servers:
        server.stop()
    if on_stop:
        on_stop()


def run_service(build: Callable[..., ServiceServer]) -> None:
    """Entry point of a one-service process: settings from env, start, warm up, serve until SIGTERM."""
    from shared.config import Settings
    from shared.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings.log_level)
    server = build(settings)
    server.start()
    server.warm_up()
    settle_heap()
    server.mark_serving()
    run_until_signalled([server])
