"""ragkb: the user-facing package — CLI, REST clients and the embedded (one-process) stack."""

from ragkb.aio import AsyncClient
from ragkb.client import RagkbApiError, RagkbClient

__all__ = ["AsyncClient", "RagkbApiError", "RagkbClient"]
