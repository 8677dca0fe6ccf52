"""The project's exceptions and their mapping to gRPC and HTTP status codes.

Domain code raises these; servicers translate them into gRPC status with
`abort_with`, clients translate gRPC errors back with `from_rpc_error`, and the
REST gateway maps them to HTTP. One table keeps the three views consistent.
"""

from __future__ import annotations

import grpc


class RagkbError(Exception):
    """Base error. `code` is the gRPC status it maps to."""

    code = grpc.StatusCode.INTERNAL
    http_status = 500

    def __init__(self, message: str, *, stage: str | None = None):
        super().__init__(message)
        self.message = message
        self.stage = stage

    def __str__(self) -> str:
        return f"[{self.stage}] {self.message}" if self.stage else self.message


class InvalidArgument(RagkbError):
    code = grpc.StatusCode.INVALID_ARGUMENT
    http_status = 400


class NotFound(RagkbError):
    code = grpc.StatusCode.NOT_FOUND
    http_status = 404


class AlreadyExists(RagkbError):
    code = grpc.StatusCode.ALREADY_EXISTS
    http_status = 409


class FailedPrecondition(RagkbError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    http_status = 412


class UnsupportedFileType(InvalidArgument):
    http_status = 415


class PayloadTooLarge(InvalidArgument):
    """A request body or upload over its size limit (HTTP 413)."""

    http_status = 413


class Unavailable(RagkbError):
    code = grpc.StatusCode.UNAVAILABLE
    http_status = 503


class DeadlineExceeded(RagkbError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    http_status = 504


class Unauthenticated(RagkbError):
    code = grpc.StatusCode.UNAUTHENTICATED
    http_status = 401


class PermissionDenied(RagkbError):
    code = grpc.StatusCode.PERMISSION_DENIED
    http_status = 403


_BY_CODE: dict[grpc.StatusCode, type[RagkbError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}

# Trailing metadata key carrying the error's class name, so a client can restore
# subclasses that share a status code (UnsupportedFileType vs InvalidArgument).
ERROR_KIND_KEY = "ragkb-error-kind"
_BY_NAME: dict[str, type[RagkbError]] = {
    cls.__name__: cls
    for cls in (RagkbError, InvalidArgument, NotFound, AlreadyExists, FailedPrecondition,
                UnsupportedFileType, PayloadTooLarge, Unavailable, DeadlineExceeded, Unauthenticated,
                PermissionDenied)
}


def from_rpc_error(error: grpc.RpcError, *, service: str) -> RagkbError:
    """Translate a failed call into the project's exception, keeping the server's message."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else None) or str(error)
    kind = None
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == ERROR_KIND_KEY:
            kind = _BY_NAME.get(value)
    cls = kind or _BY_CODE.get(code, RagkbError)
    if cls is RagkbError:
        return RagkbError(f"{service}: {code.name}: {details}")
    return cls(details)
