"""`ragkb eval`: BEIR loading, corpus limiting, metrics and the vector cache (no engines, no model)."""

import numpy as np
import pytest

from ragkb.eval import VectorCache, limit_corpus, load_beir, mrr_at, ndcg_at, recall_at
from shared.errors import InvalidArgument

pytestmark = pytest.mark.unit


def write_beir(root, *, qrels="query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td3\t1\n"):
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "A", "text": "alpha"}\n{"_id": "d2", "title": "B", "text": "beta"}\n'
        '{"_id": "d3", "title": "", "text": "电池"}\n', encoding="utf-8")
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "beta?"}\n{"_id": "q2", "text": "电池多久"}\n'
                                        '{"_id": "q3", "text": "unjudged"}\n', encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return root


def test_load_beir_keeps_judged_queries_only(tmp_path):
    data = load_beir(write_beir(tmp_path), "test")
    assert set(data.queries) == {"q1", "q2"} and data.qrels["q2"] == {"d3": 1}
    assert data.corpus["d3"] == ("", "电池")


@pytest.mark.parametrize("qrels, message", [
    pytest.param("q1\td2\n", "3 tab-separated columns", id="columns"),
    pytest.param("q1\td2\tyes\n", "not an integer", id="score"),
    pytest.param("nobody\td2\t1\n", "no query with text", id="no-queries"),
])
def test_bad_qrels_are_refused_with_the_line(tmp_path, qrels, message):
    with pytest.raises(InvalidArgument, match=message):
        load_beir(write_beir(tmp_path, qrels=qrels), "test")


def test_missing_split_and_corrupt_corpus_are_named(tmp_path):
    root = write_beir(tmp_path)
    with pytest.raises(InvalidArgument, match="split 'dev'"):
        load_beir(root, "dev")
    (root / "corpus.jsonl").write_text('{"_id": "d1"}\n{broken\n', encoding="utf-8")
    with pytest.raises(InvalidArgument, match="corpus.jsonl:2 is not valid JSON"):
        load_beir(root, "test")


def test_limit_keeps_relevant_documents_first(tmp_path):
    data = limit_corpus(load_beir(write_beir(tmp_path), "test"), 2)
    assert set(data.corpus) == {"d2", "d3"} and set(data.queries) == {"q1", "q2"}
    only_one = limit_corpus(load_beir(write_beir(tmp_path / "x"), "test"), 1)
    assert set(only_one.corpus) == {"d2"} and set(only_one.queries) == {"q1"}


@pytest.mark.parametrize("ranked, ndcg, recall10, mrr", [
    pytest.param(["r1", "r2", "x"], 1.0, 1.0, 1.0, id="perfect"),
    pytest.param(["x", "r1"], (1 / np.log2(3)) / (1 + 1 / np.log2(3)), 0.5, 0.5, id="second"),
    pytest.param(["x"] * 10 + ["r1"], 0.0, 0.0, 0.0, id="beyond-10"),
])
def test_metrics(ranked, ndcg, recall10, mrr):
    judged = {"r1": 1, "r2": 1, "n": 0}
    assert ndcg_at(ranked, judged, 10) == pytest.approx(ndcg)
    assert recall_at(ranked, judged, 10) == pytest.approx(recall10)
    assert mrr_at(ranked, judged, 10) == pytest.approx(mrr)


def test_vector_cache_is_keyed_by_model_and_text(tmp_path):
    cache = VectorCache(tmp_path / "v.sqlite")
    key = VectorCache.key("m1", "text")
    assert key != VectorCache.key("m2", "text")
    cache.put([(key, np.arange(3, dtype=np.float32))])
    assert cache.get([key], 3)[key].tolist() == [0, 1, 2]
    assert cache.get([key], 4) == {}  # a vector of another dimension is never reused
    cache.close()


def test_eval_command_runs_on_a_fresh_data_dir(tmp_path, monkeypatch, capsys):
    """No profiles file yet (a new machine): the built-in profiles serve the embedded engines."""
    from ragkb.cli import main

    monkeypatch.setenv("RAGKB_DATA_DIR", str(tmp_path / "fresh"))
    monkeypatch.delenv("RAGKB_PROFILES_FILE", raising=False)
    dataset = write_beir(tmp_path / "beir")
    assert main(["eval", "--dataset", str(dataset), "--cache", str(tmp_path / "v.sqlite")]) == 0
    assert "hybrid" in capsys.readouterr().out
