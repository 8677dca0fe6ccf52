"""The runtime's stage contracts, step settings and failure reporting, with custom in-process stages."""

import threading
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.gateway import auth
from services.gateway.metrics import GatewayMetrics
from services.gateway.query.runtime import StageFailed, create_runtime
from services.gateway.query.stages import Generated, Preprocessed, Refined, Retrieved
from services.gateway.query.steps import StepRegistry
from services.gateway.traces.spans import tracer_for
from services.gateway.traces.store import TraceStore
from shared.contracts import chunk_pb2, gateway_pb2
from shared.errors import InvalidArgument, Unavailable
from shared.state.sql import SqliteDatabase

pytestmark = pytest.mark.unit


def candidate(chunk_id: str, score: float, namespace: str = "default") -> chunk_pb2.Candidate:
    chunk = chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, doc_id=f"doc-{chunk_id}", namespace=namespace,
                                     raw_content=f"text of {chunk_id}")
    return chunk_pb2.Candidate(chunk=chunk, score=score, route=chunk_pb2.ROUTE_FUSED, bm25_rank=1, bm25_score=2.5)


class UpperPreprocessor:
    def preprocess(self, query, context):
        return Preprocessed(query=query.upper(), metadata={"custom": "upper"})


class ListRetriever:
    def __init__(self):
        self.seen = []

    def retrieve(self, query, context):
        self.seen.append((query.query, list(context.namespaces)))
        fused = [candidate("a", 0.9), candidate("b", 0.5), candidate("c", 0.1)]
        return Retrieved(candidates=fused, bm25=fused[:2], dense=fused[1:], metadata={"retriever": "list"})


class ReversePostProcessor:
    def postprocess(self, query, retrieved, context, *, timeout_s=None):
        kept = list(reversed(retrieved.candidates))[:2]
        return Refined(candidates=kept, metadata={"model": "reverse"})


class EchoGenerator:
    def generate(self, query, chunks, context, *, timeout_s=None):
        return Generated(answer=f"{query}: " + ",".join(c.chunk.chunk_id for c in chunks), metadata={"generator": "echo"})


class Broken:
    def __init__(self, error):
        self.error = error

    def preprocess(self, query, context):
        raise self.error

    def retrieve(self, query, context):
        raise self.error

    def postprocess(self, query, retrieved, context, *, timeout_s=None):
        raise self.error

    def generate(self, query, chunks, context, *, timeout_s=None):
        raise self.error


def request(query="where is it", **kwargs):
    return gateway_pb2.QueryRequest(kb="kb", query=query, **kwargs)


def runtime(**overrides):
    stages = dict(retriever=ListRetriever(), generator=EchoGenerator())
    stages.update(overrides)
    return create_runtime(**stages)


def test_every_stage_can_be_replaced_and_is_used():
    retriever = ListRetriever()
    result = runtime(preprocessor=UpperPreprocessor(), retriever=retriever,
                     postprocessor=ReversePostProcessor()).run(request("where is it"))
    assert result.original_query == "where is it" and result.effective_query == "WHERE IS IT"
    assert retriever.seen == [("WHERE IS IT", ["default"])]
    assert [c.chunk.chunk_id for c in result.chunks] == ["c", "b"]
    assert result.answer == "WHERE IS IT: c,b"
    assert [s.name for s in result.stages] == ["pre-retrieval", "retrieval", "post-retrieval", "generation"]
    assert result.stage("pre-retrieval").metadata["custom"] == "upper"
    assert result.stage("post-retrieval").metadata["model"] == "reverse"
    assert result.stage("generation").metadata["generator"] == "echo"
    assert result.to_response().trace_id == result.trace_id


def test_light_defaults_pass_the_query_and_candidates_through():
    result = runtime().run(request("  where   is it ", top_k=2))
    assert result.effective_query == "where is it"
    assert [c.chunk.chunk_id for c in result.chunks] == ["a", "b"]
    assert [d["chunk_id"] for d in result.trace["lists"]["dropped"]] == ["c"]
    assert result.trace["lists"]["dropped"][0]["reason"] == "top_k"


@pytest.mark.parametrize("slot, stage", [
    pytest.param("preprocessor", "pre-retrieval", id="pre-retrieval"),
    pytest.param("retriever", "retrieval", id="retrieval"),
    pytest.param("postprocessor", "post-retrieval", id="post-retrieval"),
    pytest.param("generator", "generation", id="generation"),
])
@pytest.mark.parametrize("error, kind", [
    pytest.param(lambda: Unavailable("backend down"), Unavailable, id="project-error"),
    pytest.param(lambda: KeyError("boom"), StageFailed, id="unexpected-error"),
])
def test_a_failing_stage_is_named_in_the_error(slot, stage, error, kind):
    metrics = GatewayMetrics()
    with pytest.raises(kind) as raised:
        runtime(metrics=metrics, **{slot: Broken(error())}).run(request())
    assert raised.value.stage == stage
    assert stage in str(raised.value)
    rendered = metrics.render().decode()
    assert f'ragkb_stage_errors_total{{error="{kind.__name__}",stage="{stage}"}} 1.0' in rendered


@pytest.mark.parametrize("query, message", [
    pytest.param("   ", "query is empty", id="blank"),
    pytest.param("x" * 2001, "2001 characters", id="too-long"),
])
def test_bad_queries_fail_in_pre_retrieval(query, message):
    with pytest.raises(InvalidArgument, match=message) as raised:
        runtime().run(request(query))
    assert raised.value.stage == "pre-retrieval"


def test_a_step_toggled_in_the_file_changes_the_next_request(tmp_path):
    path = tmp_path / "steps.yaml"
    rt = runtime(postprocessor=ReversePostProcessor(), steps=StepRegistry(path))
    assert rt.run(request()).answer == "where is it: c,b"
    path.write_text("steps:\n  rerank: {enabled: false}\n  generation: {enabled: false}\n")
    result = rt.run(request())
    assert result.answer == "" and [c.chunk.chunk_id for c in result.chunks] == ["a", "b", "c"]
    assert {(n["step"], n["status"]) for n in result.trace["step_notes"]} == {("rerank", "disabled"),
                                                                               ("generation", "disabled")}
    path.write_text("steps:\n  generation:\n    skip_when: {languages: [zh]}\n")
    assert rt.run(request()).answer == "where is it: c,b"
    skipped = rt.run(request("它在哪里"))
    assert skipped.answer == "" and skipped.trace["step_notes"][-1]["detail"] == "query language is zh"


def test_an_invalid_steps_file_keeps_the_last_good_settings(tmp_path):
    path = tmp_path / "steps.yaml"
    path.write_text("steps:\n  rerank: {enabled: false}\n")
    registry = StepRegistry(path)
    assert registry.current().rerank.enabled is False
    path.write_text("steps:\n  rerank: {enabled: false, timeout_s: -1}\n  bogus: {}\n")
    assert registry.current().rerank.enabled is False
    assert "rerank.timeout_s" in registry.last_error and "bogus" in registry.last_error
    with pytest.raises(InvalidArgument, match="timeout_s"):
        registry.reload()
    path.write_text("steps:\n  hyde:\n    skip_when: {matches: '(unclosed'}\n")
    registry.current()
    assert "invalid regular expression '(unclosed'" in registry.last_error


def test_traces_record_every_list_and_are_bounded(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite", limit=3)
    rt = runtime(postprocessor=ReversePostProcessor(), traces=store)
    results = [rt.run(request(f"question {i}")) for i in range(5)]
    assert store.count() == 3
    trace = store.get(results[-1].trace_id)
    assert [e["chunk_id"] for e in trace["lists"]["bm25"]] == ["a", "b"]
    assert [e["rank"] for e in trace["lists"]["dense"]] == [1, 2]
    assert trace["lists"]["fused"][0] == {**trace["lists"]["fused"][0], "score": 0.9, "bm25_score": 2.5}
    assert [e["chunk_id"] for e in trace["lists"]["reranked"]] == ["c", "b"]
    assert trace["counts"] == {"bm25": 2, "dense": 2, "fused": 3, "reranked": 2, "dropped": 0}
    # kb_version: empty when the stages are no services (no KB settings resolved)
    assert trace["request"] == {"kb": "kb", "kb_version": "", "query": "question 4", "namespaces": ["default"],
                                "requested_namespaces": [], "top_k": 0}
    with pytest.raises(Exception, match="evicted"):
        store.get(results[0].trace_id)
    with pytest.raises(InvalidArgument):
        store.get("../../etc/passwd")


class GatedDatabase(SqliteDatabase):
    """A real SQLite trace database whose commits wait for `gate`, to hold the trace writer mid-batch."""

    def __init__(self, path):
        from services.gateway.traces.store import SQLITE_SCHEMA

        super().__init__(path, schema=SQLITE_SCHEMA, durable=False)
        self.gate = threading.Event()
        self.commits = 0

    def transaction(self):
        self.gate.wait(30)
        self.commits += 1
        return super().transaction()


def test_a_trace_reads_back_while_it_waits_to_be_written(tmp_path):
    database = GatedDatabase(tmp_path / "traces.sqlite")
    store = TraceStore(database)
    result = runtime(traces=store).run(request("where is it"))
    queued = store.get(result.trace_id)  # the writer is held: this comes from the queue
    assert database.execute("SELECT count(*) FROM traces").one()[0] == 0
    assert queued["request"]["query"] == "where is it" and queued["lists"]["fused"][0]["chunk_id"] == "a"
    database.gate.set()
    assert store.flush()
    assert store.get(result.trace_id) == queued
    store.close()


def test_a_full_trace_queue_drops_and_counts_instead_of_waiting(tmp_path):
    database = GatedDatabase(tmp_path / "traces.sqlite")
    store = TraceStore(database, queue_size=2)
    metrics = GatewayMetrics()
    rt = runtime(traces=store, metrics=metrics)
    results = [rt.run(request(f"question {i}")) for i in range(5)]  # none of them waits for the writer
    assert all(result.answer for result in results)
    assert metrics.registry.get_sample_value("ragkb_traces_dropped_total") == 3
    database.gate.set()
    assert store.count() == 2
    kept = [store.get(r.trace_id)["request"]["query"] for r in results[:2]]
    assert kept == ["question 0", "question 1"]
    with pytest.raises(Exception, match="no trace"):
        store.get(results[2].trace_id)
    store.close()


def test_queued_traces_are_written_in_batches_and_flushed_on_close(tmp_path):
    database = GatedDatabase(tmp_path / "traces.sqlite")
    store = TraceStore(database, batch_size=10, limit=100)
    rt = runtime(traces=store)
    ids = [rt.run(request(f"question {i}")).trace_id for i in range(25)]
    database.gate.set()
    store.close()  # writes everything still queued
    assert database.commits <= 4  # 25 traces: at most one held commit plus three batches of 10
    reopened = TraceStore(tmp_path / "traces.sqlite", limit=100)
    assert reopened.count() == 25 and reopened.get(ids[-1])["request"]["query"] == "question 24"
    assert not store.put(reopened.get(ids[0]))  # a closed store takes nothing
    reopened.close()


def test_the_writer_gathers_the_traces_of_a_burst_into_one_commit(tmp_path, monkeypatch):
    """Woken by a first trace, the writer waits up to WRITE_GATHER_S for more before it commits; a flush ends
    the wait."""
    monkeypatch.setattr("services.gateway.traces.store.WRITE_GATHER_S", 60.0)
    database = GatedDatabase(tmp_path / "traces.sqlite")
    database.gate.set()  # commits as soon as the writer makes them
    store = TraceStore(database, batch_size=100, limit=100)
    rt = runtime(traces=store)
    ids = [rt.run(request(f"question {i}")).trace_id for i in range(20)]
    assert database.commits == 0 and store.get(ids[-1])["request"]["query"] == "question 19"  # still gathering
    assert store.flush() and database.commits == 1 and store.count() == 20
    assert {store.get(i)["request"]["query"] for i in ids} == {f"question {i}" for i in range(20)}
    store.close()


def test_a_trace_alone_is_written_once_the_gathering_window_passes(tmp_path):
    database = GatedDatabase(tmp_path / "traces.sqlite")
    database.gate.set()
    store = TraceStore(database)
    rt = runtime(traces=store)
    rt.run(request("alone"))
    for _ in range(200):  # no flush: only the window ends the writer's wait
        if database.execute("SELECT count(*) FROM traces").one()[0] == 1:
            break
        time.sleep(0.05)
    assert database.execute("SELECT count(*) FROM traces").one()[0] == 1 and database.commits == 1
    store.close()


def test_failed_requests_are_traced_with_their_stage(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    with pytest.raises(Unavailable):
        runtime(traces=store, generator=Broken(Unavailable("llm down"))).run(request())
    store.flush()
    (body,) = [store.get(row[0]) for row in store._db.execute("SELECT trace_id FROM traces").rows]
    assert body["error"] == {"type": "Unavailable", "message": "llm down", "stage": "generation"}
    assert body["counts"]["fused"] == 3


def test_spans_are_exported_per_stage_when_a_tracer_is_configured():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime(tracer=tracer_for("", provider)).run(request())
    with pytest.raises(StageFailed):
        runtime(tracer=tracer_for("", provider), generator=Broken(KeyError("x"))).run(request())
    names = [span.name for span in exporter.get_finished_spans()]
    assert names[:5] == ["ragkb.pre-retrieval", "ragkb.retrieval", "ragkb.post-retrieval", "ragkb.generation",
                         "ragkb.query"]
    failed = [s for s in exporter.get_finished_spans()[5:] if s.name == "ragkb.generation"][0]
    assert not failed.status.is_ok and "KeyError" in failed.status.description


def test_exporter_names_choose_the_tracer():
    from opentelemetry import trace

    assert isinstance(tracer_for(""), trace.NoOpTracer) and isinstance(tracer_for("none"), trace.NoOpTracer)
    assert not isinstance(tracer_for("console"), trace.NoOpTracer)


def test_unknown_exporters_and_stage_objects_are_refused():
    with pytest.raises(ValueError, match="'zipkin'"):
        tracer_for("zipkin")
    with pytest.raises(ValueError, match="retriever str has no retrieve"):
        create_runtime(retriever="not a stage", generator=EchoGenerator())


def test_the_callers_namespaces_scope_the_retrieval():
    retriever = ListRetriever()
    reader = auth.Principal(name="a", role="reader", namespaces=("team-a", "shared"), groups=("hr",))
    rt = runtime(retriever=retriever)
    rt.run(request(), principal=reader)
    rt.run(request(namespaces=["shared"]), principal=reader)
    assert [ns for _, ns in retriever.seen] == [["team-a", "shared"], ["shared"]]
    with pytest.raises(auth.PermissionDenied, match="team-b") as raised:
        rt.run(request(namespaces=["team-b"]), principal=reader)
    assert raised.value.stage == "pre-retrieval" and raised.value.http_status == 403


def test_each_query_logs_one_json_line_with_its_trace_id_and_stage_timings(caplog):
    import json
    import logging

    from shared.logs import JsonFormatter

    with caplog.at_level(logging.INFO, logger="ragkb.gateway.runtime"):
        result = runtime().run(request())
    (record,) = [r for r in caplog.records if r.getMessage() == "query"]
    line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == result.trace_id and line["outcome"] == "ok"
    assert set(line["stages"]) == {"pre-retrieval", "retrieval", "post-retrieval", "generation"}
