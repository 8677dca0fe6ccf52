"""Upload size limit enforced on the wire: 413 before the body of a too-large upload is read.

FastAPI parses a multipart form completely before the route runs, so a size
check in the route comes after the whole body was received (and spooled). This
ASGI middleware guards the document-upload route only: a declared
Content-Length over the limit is answered at once, without reading a byte of
the body; a body without a length (chunked) is counted as it streams in and cut
off at the limit.
"""

from __future__ import annotations

import json
import re

UPLOAD_PATH = re.compile(r"^/v1/knowledge-bases/[^/]+/documents/?$")
FORM_OVERHEAD_BYTES = 64 * 1024  # multipart boundaries, headers and the small form fields around the file


class _BodyTooLarge(Exception):
    pass


class UploadSizeLimit:
    """ASGI middleware: POSTs to the upload route may carry at most `max_file_bytes` + form overhead."""

    def __init__(self, app, *, max_file_bytes: int):
        if max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be >= 1, got {max_file_bytes}")
        self.app = app
        self.max_file_bytes = max_file_bytes
        self.max_body_bytes = max_file_bytes + FORM_OVERHEAD_BYTES

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not UPLOAD_PATH.match(scope["path"]):
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return await self._refuse(send, f"the upload is {int(declared)} bytes")
        received = 0
        refused = answered = False

        async def counting_receive():
            nonlocal received, refused
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                refused = True
                raise _BodyTooLarge()
            return message

        async def answer_413():
            nonlocal answered
            if not answered:
                answered = True
                await self._refuse(send, f"the upload passed {self.max_body_bytes} bytes")

        async def guarded_send(message):
            # the form parser may turn the cut-off into its own error response: answer 413 instead
            if not refused:
                await send(message)
            elif message["type"] == "http.response.start":
                await answer_413()

        try:
            await self.app(scope, counting_receive, guarded_send)
        except _BodyTooLarge:
            await answer_413()

    async def _refuse(self, send, what: str) -> None:
        message = (f"{what}; the limit is {self.max_file_bytes} bytes per file "
                   f"(plus {FORM_OVERHEAD_BYTES} bytes of form data)")
        body = json.dumps({"error": {"type": "PayloadTooLarge", "message": message, "stage": None}}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
