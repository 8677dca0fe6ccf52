"""API-key check for the gateway's gRPC API: metadata `authorization: Bearer <key>` or `x-api-key`."""

from __future__ import annotations

import grpc

from services.gateway import auth
from shared.server import SCOPED_PREFIX, run_admitted


class AuthInterceptor(grpc.ServerInterceptor):
    """Resolves the caller for every ragkb RPC and makes it the current principal while the handler runs."""

    def __init__(self, keys: auth.KeyStore):
        self._keys = keys

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(SCOPED_PREFIX):
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        role = auth.grpc_role(method)

        def admit(request, context):
            principal = self._keys.authenticate(_token(metadata), loopback_peer=auth.is_loopback_peer(context.peer()))
            principal.require(role)
            return auth.acting_as(principal)

        return run_admitted(handler, admit)


def _token(metadata: dict) -> str | None:
    header = metadata.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return metadata.get("x-api-key") or None
