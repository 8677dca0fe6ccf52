"""OpenTelemetry spans for queries, when an exporter is configured.

`tracer_for("")` is a no-op tracer: no spans are made unless a deployment asks
for them (`console`, or `otlp` with opentelemetry-exporter-otlp installed).
Tests pass their own tracer provider with an in-memory exporter.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)

from shared.errors import FailedPrecondition

EXPORTERS = ("", "none", "console", "otlp")


def exporter_for(name: str) -> SpanExporter | None:
    if name not in EXPORTERS:
        raise ValueError(f"unknown OpenTelemetry exporter {name!r}; choose one of: none, console, otlp")
    if name in ("", "none"):
        return None
    if name == "console":
        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter,
        )
    except ImportError:
        raise FailedPrecondition("RAGKB_OTEL_EXPORTER=otlp needs the package opentelemetry-exporter-otlp") from None
    return OTLPSpanExporter()


def tracer_for(exporter_name: str, provider: TracerProvider | None = None) -> trace.Tracer:
    """A tracer that exports through the named exporter, or through `provider` when one is given."""
    if provider is None:
        exporter = exporter_for(exporter_name)
        if exporter is None:
            return trace.NoOpTracer()
        provider = TracerProvider(resource=Resource.create({"service.name": "ragkb-gateway"}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider.get_tracer("ragkb.gateway")
