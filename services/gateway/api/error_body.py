"""The JSON body of every REST error: ragkb's own shape, or OpenAI's on the OpenAI-compatible routes.

ragkb routes answer `{"error": {"type", "message", "stage"}}`. The routes OpenAI
clients call (`/v1/chat/completions`, `/v1/models`) answer the shape those
clients parse, `{"error": {"message", "type", "param", "code"}}`, with ragkb's
error name as `code` and the failed `stage` kept as an extra field.
"""

from __future__ import annotations

import re

OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")

# OpenAI's error types by HTTP status; anything else 4xx is an invalid request, 5xx a server error
_OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                 429: "rate_limit_error"}


def is_openai_path(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in OPENAI_PATHS)


def error_body(path: str, status: int, kind: str, message: str, stage: str | None = None) -> dict:
    if not is_openai_path(path):
        return {"error": {"type": kind, "message": message, "stage": stage}}
    openai_type = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": openai_type, "param": None, "code": snake_case(kind),
                      "stage": stage}}


def snake_case(name: str) -> str:
    """`ModelNotFound` -> `model_not_found`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
