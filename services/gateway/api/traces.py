"""REST routes for traces (read, replay) and the Prometheus scrape endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from services.gateway import auth
from services.gateway.traces.store import visible_to
from shared.contracts import gateway_pb2
from shared.errors import FailedPrecondition, NotFound

router = APIRouter(tags=["observability"])


def _trace_for_caller(request: Request, trace_id: str) -> dict:
    runtime = request.app.state.gateway.runtime
    if runtime.traces is None:
        raise FailedPrecondition("this gateway does not store traces")
    trace = runtime.traces.get(trace_id)
    principal = auth.current()
    if not all(principal.can_see(ns) for ns in trace["request"]["namespaces"]):
        raise NotFound(f"no trace {trace_id!r}")  # the same answer as a missing trace
    return visible_to(trace, principal.can_read)


@router.get("/v1/traces/{trace_id}")
def get_trace(trace_id: str, request: Request):
    """Everything one query went through: step outcomes, stage timings, BM25/dense/fused/reranked/dropped lists."""
    return _trace_for_caller(request, trace_id)


@router.post("/v1/traces/{trace_id}/replay")
def replay_trace(trace_id: str, request: Request):
    """Run a traced request again with today's data and step settings; the new trace is returned too."""
    from services.gateway.api.rest import query_json

    original = _trace_for_caller(request, trace_id)["request"]
    gateway = request.app.state.gateway
    result = gateway.runtime.run(gateway_pb2.QueryRequest(
        kb=original["kb"], query=original["query"], namespaces=original["namespaces"], top_k=original["top_k"]))
    return {"replay_of": trace_id, "result": query_json(result.to_response()), "trace": result.trace}


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request):
    runtime_metrics = request.app.state.gateway.runtime.metrics
    if runtime_metrics is None:
        raise FailedPrecondition("metrics are not enabled on this gateway")
    return Response(content=runtime_metrics.render(), media_type=runtime_metrics.content_type)
