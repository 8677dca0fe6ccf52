"""Prometheus metrics of the gateway: per-stage latency, errors by stage, step outcomes, ingestion.

Each gateway owns its registry (no process-global state), so several gateways
in one process (tests, embedded mode) never collide. Job counts by state are
read from the job store at scrape time (SQLite or PostgreSQL), so they are
right whichever process (in-process queue or Celery worker) moved the jobs.
"""

from __future__ import annotations

import logging

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from shared.contracts import gateway_pb2
from shared.jobs import JobStore

log = logging.getLogger("ragkb.gateway.metrics")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, *, jobs: JobStore | None = None):
        self.registry = CollectorRegistry()
        self.stage_seconds = Histogram("ragkb_stage_latency_seconds", "Query stage latency", ["stage"],
                                       buckets=LATENCY_BUCKETS, registry=self.registry)
        self.query_seconds = Histogram("ragkb_query_latency_seconds", "Whole query latency",
                                       buckets=LATENCY_BUCKETS, registry=self.registry)
        self.stage_errors = Counter("ragkb_stage_errors_total", "Failed queries by stage and error type",
                                    ["stage", "error"], registry=self.registry)
        self.queries = Counter("ragkb_queries_total", "Queries by outcome (ok, error)", ["outcome"],
                               registry=self.registry)
        self.steps = Counter("ragkb_step_outcomes_total", "Optional step outcomes", ["step", "status"],
                             registry=self.registry)
        self.traces_dropped = Counter("ragkb_traces_dropped_total", "Query traces not stored: the trace "
                                      "queue was full", registry=self.registry)
        self.auth_failures = Counter("ragkb_auth_failures_total", "Rejected requests by reason", ["reason"],
                                     registry=self.registry)
        if jobs is not None:
            self.registry.register(_JobStateCollector(jobs))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _JobStateCollector:
    """ragkb_ingest_jobs{state=...}: jobs per state, read from the job store when scraped."""

    def __init__(self, jobs: JobStore):
        self._jobs = jobs

    def describe(self):
        return []

    def collect(self):
        family = GaugeMetricFamily("ragkb_ingest_jobs", "Ingestion jobs by state", labels=["state"])
        counts = {name.removeprefix("JOB_STATE_").lower(): 0 for name in gateway_pb2.JobState.keys()
                  if name != "JOB_STATE_UNSPECIFIED"}
        try:
            for state, count in self._jobs.counts_by_state().items():
                counts[gateway_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()] = count
        except Exception as error:  # a scrape must not fail because of the job store (sqlite3 or psycopg errors)
            log.warning("job counts unavailable: %s", error)
        for state, count in counts.items():
            family.add_metric([state], count)
        yield family
