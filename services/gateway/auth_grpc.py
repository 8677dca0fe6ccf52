"""API-key check for the gateway's gRPC API: metadata `authorization: Bearer <key>` or `x-api-key`."""

from __future__ import annotations

import grpc

from services.gateway import auth
from shared.errors import RagkbError

SCOPED_PREFIX = "/ragkb."  # health and reflection stay open for probes


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
        keys = self._keys

        def resolve(context):
            principal = keys.authenticate(_token(metadata), loopback_peer=auth.is_loopback_peer(context.peer()))
            principal.require(role)
            return principal

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            def unary(request, context):
                token = auth.use(resolve(context))
                try:
                    return inner(request, context)
                finally:
                    auth.reset(token)

            return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=handler.request_deserializer,
                                                       response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            def stream(request, context):
                try:
                    principal = resolve(context)
                except RagkbError as error:  # streams are not wrapped by the server's error translation
                    context.abort(error.code, str(error))
                token = auth.use(principal)
                try:
                    yield from inner_stream(request, context)
                finally:
                    auth.reset(token)

            return grpc.unary_stream_rpc_method_handler(stream, request_deserializer=handler.request_deserializer,
                                                        response_serializer=handler.response_serializer)
        return handler


def _token(metadata: dict) -> str | None:
    header = metadata.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return metadata.get("x-api-key") or None
