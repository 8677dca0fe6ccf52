"""`ragkb tune`: question files, the unseen split, chunk-level judgements and the fit (no engines, no model)."""

import json

import pytest

from ragkb.tune import (Question, QueryRun, fit, fuse_run, judgements, load_runs, mean_ndcg, read_questions,
                        save_runs, split_unseen)
from services.retriever.fusion import FusionSpec
from shared.config import RetrieverConfig
from shared.contracts import chunk_pb2
from shared.errors import InvalidArgument

pytestmark = pytest.mark.unit


def write_lines(path, *records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records),
                    encoding="utf-8")
    return path


def test_question_file_accepts_lists_grades_and_answers(tmp_path):
    questions = read_questions(write_lines(
        tmp_path / "q.jsonl", {"query": "battery?", "relevant": ["a"]},
        {"id": "x", "query": "电池多久？", "relevant": {"b": 2}, "answers": ["45分钟"]}))
    assert questions[0] == Question("1", "battery?", {"a": 1})
    assert questions[1] == Question("x", "电池多久？", {"b": 2}, ("45分钟",))


@pytest.mark.parametrize("line, message", [
    pytest.param("{broken", "q.jsonl:1 is not valid JSON", id="json"),
    pytest.param({"query": " ", "relevant": ["a"]}, 'non-empty "query"', id="empty-query"),
    pytest.param({"query": "q", "relevant": []}, '"relevant"', id="no-relevant"),
    pytest.param({"query": "q", "relevant": ["a"], "answers": [""]}, '"answers"', id="empty-answer"),
])
def test_bad_question_lines_are_named(tmp_path, line, message):
    with pytest.raises(InvalidArgument, match=message):
        read_questions(write_lines(tmp_path / "q.jsonl", line))


def test_unseen_split_is_stable_and_never_empty():
    questions = [Question(str(i), f"question {i}", {"d": 1}) for i in range(100)]
    tuning, unseen = split_unseen(questions)
    assert 15 <= len(unseen) <= 45 and len(tuning) + len(unseen) == 100
    assert split_unseen(list(reversed(questions)))[1] == list(reversed(unseen))  # by text, not by position
    with pytest.raises(InvalidArgument, match="too few"):
        split_unseen(questions[:1])


def chunk(chunk_id, doc_id, content):
    return chunk_pb2.KnowledgeChunk(chunk_id=chunk_id, doc_id=doc_id, content=content)


def test_answers_judge_chunks_of_the_relevant_document_that_contain_them():
    pool = {"c1": chunk("c1", "guide", "charges in 45 minutes"), "c2": chunk("c2", "guide", "speed 1.8 m/s"),
            "c3": chunk("c3", "faq", "45 minutes too")}
    unit_of, judged = judgements(Question("q", "charge?", {"guide": 1}, ("45 minutes",)), pool)
    assert judged == {"c1": 1} and unit_of["c2"] == "c2"
    unit_of, judged = judgements(Question("q", "charge?", {"guide": 1}), pool)
    assert judged == {"guide": 1} and unit_of == {"c1": "guide", "c2": "guide", "c3": "faq"}


def run(bm25, dense, relevant, competence=None):
    """A stored query run over single-chunk documents named by their ids."""
    ids = {i for i, _ in bm25} | {i for i, _ in dense}
    return QueryRun(question=Question(relevant, relevant, {relevant: 1}), routes={"bm25": bm25, "dense": dense},
                    unit_of={i: i for i in ids}, judged={relevant: 1}, competence=competence or {},
                    hybrid=[], latency_ms={}, degraded=[])


def test_fit_prefers_the_route_that_finds_the_answers():
    # dense ranks the relevant document first, bm25 ranks it last: the fit must lean on dense
    runs = [run([(f"x{n}", 9.0), (f"y{n}", 5.0), (f"r{n}", 1.0)], [(f"r{n}", 0.9), (f"x{n}", 0.2)], f"r{n}")
            for n in range(5)]
    fitted = fit(runs)
    assert fitted.weights["dense"] > fitted.weights["bm25"] and fitted.ndcg10 == pytest.approx(1.0)
    config = fitted.apply(RetrieverConfig())
    assert (config.fusion, config.bm25_weight, config.dense_weight) == (
        fitted.spec.method, fitted.weights["bm25"], fitted.weights["dense"])


def test_refusion_applies_the_measured_competence():
    blind_dense = run([("r", 3.0), ("x", 1.0)], [("x", 0.9), ("r", 0.1)], "r", competence={"bm25": 1.0, "dense": 0.0})
    assert fuse_run(blind_dense, FusionSpec("rrf"), {"bm25": 0.1, "dense": 0.9})[0] == "r"
    assert mean_ndcg([blind_dense], FusionSpec("convex", "minmax"), {"bm25": 0.1, "dense": 0.9}) == pytest.approx(1.0)


@pytest.mark.parametrize("name", [pytest.param("runs.jsonl", id="plain"), pytest.param("runs.jsonl.gz", id="gzip")])
def test_saved_runs_load_back_equal_by_part(tmp_path, name):
    first = run([("a", 2.5), ("b", 1.0)], [("b", 0.8)], "b", competence={"bm25": 1.0, "dense": 0.5})
    second = run([("c", 1.0)], [("c", 0.3), ("d", 0.1)], "d")
    second.question = Question("q2", "电池多久？", {"d": 2}, ("45分钟",))
    save_runs(tmp_path / name, {"train": [first], "test": [second]})
    assert load_runs(tmp_path / name) == {"train": [first], "test": [second]}
