"""Calls between services that share a process (embedded mode), without the loopback gRPC hop.

A `ServiceServer` records the method handlers it serves. When the embedded stack runs with
`Settings.in_process_calls`, it publishes each server's handlers under the server's address
here, and a typed client (shared/clients.py) whose target is such an address calls through a
`LocalChannel` instead of its gRPC channel.

A local call is the gRPC call minus the transport, and nothing more lenient:
- the request is copied, so the servicer gets its own message as it would from the wire;
- the server's interceptors run in the same order as in the server (error translation, the tenant
  check, the caller check under mutual TLS), on the same request and a context with the same
  deadline, code, trailing metadata and peer identity (the calling client's certificate name);
- the handler runs in a fresh `contextvars.Context`, as in a server thread: it sees only the
  tenant and KB settings its request carries, never the caller's own;
- an aborted call raises a `grpc.RpcError` with the code, details and trailing metadata the
  wire would deliver, so the client turns it into the same exception; a deadline that passes
  while the handler runs ends as DEADLINE_EXCEEDED, as it would over gRPC.
Server streams and anything not recorded (health, reflection) still go over the gRPC channel.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

_published: dict[str, LocalService] = {}
_lock = threading.Lock()


class LocalService:
    """What a server serves in process: its unary handlers by method path and its interceptors, and the
    local calls in flight, so that stopping the server waits for them as gRPC waits for its own."""

    def __init__(self, name: str, handlers: dict[str, grpc.RpcMethodHandler],
                 interceptors: Sequence[grpc.ServerInterceptor], *, max_message_bytes: int):
        self.name = name
        self.handlers = handlers
        self.interceptors = tuple(interceptors)
        self.max_message_bytes = max_message_bytes
        self._in_flight = 0
        self._closed = False
        self._idle = threading.Condition()

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One local call; refused as UNAVAILABLE once the server has begun to stop."""
        with self._idle:
            if self._closed:
                raise LocalRpcError(grpc.StatusCode.UNAVAILABLE, f"{self.name} is shutting down")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def close(self, grace_s: float) -> None:
        """Refuse new local calls and wait up to `grace_s` for those in flight."""
        with self._idle:
            self._closed = True
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=grace_s)


def publish(address: str, service: LocalService) -> None:
    with _lock:
        _published[address] = service


def withdraw(address: str, service: LocalService) -> None:
    with _lock:
        if _published.get(address) is service:
            del _published[address]


def service_at(address: str) -> LocalService | None:
    """The service published at `address` in this process, or None (call it over gRPC)."""
    return _published.get(address)


class HandlerRecorder:
    """Stands in for the grpc.Server a generated `add_*Servicer_to_server` registers on: passes every
    registration through to the server and keeps the method handlers for local calls."""

    def __init__(self, server: grpc.Server, handlers: dict[str, grpc.RpcMethodHandler]):
        self._server = server
        self._handlers = handlers

    def add_generic_rpc_handlers(self, generic_handlers) -> None:
        self._server.add_generic_rpc_handlers(generic_handlers)

    def add_registered_method_handlers(self, service_name: str, method_handlers: dict) -> None:
        self._server.add_registered_method_handlers(service_name, method_handlers)
        for method, handler in method_handlers.items():
            self._handlers[f"/{service_name}/{method}"] = handler


class LocalRpcError(grpc.RpcError, grpc.Call):
    """A failed local call, shaped like the error a gRPC stub raises."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: tuple = ()):
        super().__init__(f"{code.name}: {details}")
        self._code, self._details, self._trailing = code, details, tuple(trailing_metadata)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailing

    def initial_metadata(self) -> tuple:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback) -> bool:
        return False


class _Aborted(Exception):
    """What `LocalContext.abort` raises (grpc's own abort raises a bare Exception the same way)."""


class LocalContext(grpc.ServicerContext):
    """The servicer context of one local call."""

    def __init__(self, timeout_s: float | None, metadata, peer_names: tuple[str, ...]):
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._metadata = tuple(metadata or ())
        self._peer_names = peer_names
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple = ()

    def abort(self, code, details):
        if code == grpc.StatusCode.OK:
            raise ValueError("abort() needs a non-OK status code")
        self._code, self._details = code, details
        raise _Aborted(details)

    def abort_with_status(self, status):
        self.set_trailing_metadata(status.trailing_metadata)
        self.abort(status.code, status.details)

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def expired(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def is_active(self) -> bool:
        return not self.expired()

    def code(self):
        return self._code

    def details(self):
        return self._details

    def set_code(self, code) -> None:
        self._code = code

    def set_details(self, details) -> None:
        self._details = details

    def set_trailing_metadata(self, trailing_metadata) -> None:
        self._trailing = tuple(trailing_metadata)

    def trailing_metadata(self):
        return self._trailing

    def invocation_metadata(self):
        return self._metadata

    def peer(self) -> str:
        return "inprocess:"

    def peer_identities(self):
        return [name.encode() for name in self._peer_names] or None

    def peer_identity_key(self):
        return "x509_common_name" if self._peer_names else None

    def auth_context(self) -> dict:
        return {"x509_common_name": [name.encode() for name in self._peer_names]} if self._peer_names else {}

    def send_initial_metadata(self, initial_metadata) -> None:
        pass

    def set_compression(self, compression) -> None:
        pass

    def disable_next_message_compression(self) -> None:
        pass

    def add_callback(self, callback) -> bool:
        return False

    def cancel(self) -> None:
        pass


@dataclass(frozen=True)
class _CallDetails(grpc.HandlerCallDetails):
    method: str
    invocation_metadata: tuple


def intercepted(service: LocalService, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
    """The handler the server would run for `details`: its interceptors applied outermost first."""

    def continuation_at(index: int) -> Callable[[grpc.HandlerCallDetails], Any]:
        if index == len(service.interceptors):
            return lambda call: service.handlers.get(call.method)
        return lambda call: service.interceptors[index].intercept_service(continuation_at(index + 1), call)

    return continuation_at(0)(details)


def _within_limit(message, limit: int, sender: str) -> None:
    """Refuse a message the sender's gRPC channel would refuse to send, with the same status and details."""
    size = message.ByteSize()
    if size > limit:
        raise LocalRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"{sender}: Sent message larger than max ({size} vs. {limit})")


class _LocalUnaryCall:
    """A stub's multi-callable for one unary method, run in the calling thread; `with_call` and `future`
    (which need a real call object) go through `network`, the method's callable on the gRPC channel."""

    def __init__(self, service: LocalService, method: str, peer_names: tuple[str, ...], network):
        self._service = service
        self._method = method
        self._peer_names = peer_names
        self._network = network

    def __call__(self, request, timeout=None, metadata=None, credentials=None, wait_for_ready=None,
                 compression=None):
        handler = intercepted(self._service, _CallDetails(self._method, tuple(metadata or ())))
        if handler is None or handler.unary_unary is None:
            raise LocalRpcError(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        _within_limit(request, self._service.max_message_bytes, "CLIENT")
        own_request = type(request)()
        own_request.CopyFrom(request)
        context = LocalContext(timeout, metadata, self._peer_names)
        try:
            with self._service.call():
                response = contextvars.Context().run(handler.unary_unary, own_request, context)
        except _Aborted:
            raise LocalRpcError(context.code(), context.details(), context.trailing_metadata()) from None
        except Exception as error:  # a handler without the server's error translation; gRPC says UNKNOWN
            raise LocalRpcError(grpc.StatusCode.UNKNOWN, f"Exception calling application: {error}") from None
        if context.code() not in (None, grpc.StatusCode.OK):
            raise LocalRpcError(context.code(), context.details(), context.trailing_metadata())
        if context.expired():
            raise LocalRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        _within_limit(response, self._service.max_message_bytes, "SERVER")
        return response

    def with_call(self, request, timeout=None, metadata=None, **options):
        return self._network.with_call(request, timeout=timeout, metadata=metadata, **options)

    def future(self, request, timeout=None, metadata=None, **options):
        return self._network.future(request, timeout=timeout, metadata=metadata, **options)


class LocalChannel(grpc.Channel):
    """A channel for generated stubs: unary methods the service recorded run locally, everything else
    (server streams, health, reflection) goes through `network`, the client's gRPC channel."""

    def __init__(self, service: LocalService, network: grpc.Channel, *, peer_names: tuple[str, ...] = ()):
        self.service = service
        self._network = network
        self._peer_names = peer_names

    def unary_unary(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        network = self._network.unary_unary(method, request_serializer, response_deserializer,
                                            _registered_method=_registered_method)
        handler = self.service.handlers.get(method)
        if handler is None or handler.unary_unary is None:
            return network
        return _LocalUnaryCall(self.service, method, self._peer_names, network)

    def unary_stream(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return self._network.unary_stream(method, request_serializer, response_deserializer,
                                          _registered_method=_registered_method)

    def stream_unary(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return self._network.stream_unary(method, request_serializer, response_deserializer,
                                          _registered_method=_registered_method)

    def stream_stream(self, method, request_serializer=None, response_deserializer=None, _registered_method=False):
        return self._network.stream_stream(method, request_serializer, response_deserializer,
                                           _registered_method=_registered_method)

    def subscribe(self, callback, try_to_connect=False):
        self._network.subscribe(callback, try_to_connect)

    def unsubscribe(self, callback):
        self._network.unsubscribe(callback)

    def close(self):
        """The network channel belongs to the client, which closes it."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
