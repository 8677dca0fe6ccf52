"""`ragkb eval-answers` and `ragkb calibrate` end to end: a SQuAD 2.0 article indexed into Milvus Lite +
SQLite FTS5 through the product's pipeline, MiniLM embeddings, labelled questions from ../shared/data."""

from __future__ import annotations

import json

import pytest

from ragkb.cli import main
from shared.kb import KnowledgeBaseCatalog
from tests.conftest import shared_data

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def normans(tmp_path_factory):
    """The Normans article and 80 of its questions (40 answerable, 40 unanswerable) in the eval format."""
    folder = shared_data("squad2_subset")
    directory = tmp_path_factory.mktemp("normans")
    corpus = [json.loads(line) for line in open(folder / "corpus.jsonl", encoding="utf-8")]
    corpus = [p for p in corpus if p["_id"].startswith("Normans_")]
    (directory / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in corpus))
    records = [json.loads(line) for line in open(folder / "questions.jsonl", encoding="utf-8")]
    records = [r for r in records if r["context_passage_id"].startswith("Normans_")]
    chosen = [r for r in records if r["answerable"]][:40] + [r for r in records if not r["answerable"]][:40]
    (directory / "questions.jsonl").write_text("".join(json.dumps({
        "id": r["id"], "question": r["question"], "answerable": r["answerable"],
        "gold_doc_ids": r["gold_passage_ids"], "gold_answers": r["answers"], "language": "en"}) + "\n"
        for r in chosen))
    return directory


def test_eval_answers_reports_both_parts_and_the_sweep(normans, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAGKB_DATA_DIR", str(tmp_path))
    code = main(["eval-answers", "--kb", "normans", "--questions", str(normans / "questions.jsonl"),
                 "--corpus", str(normans / "corpus.jsonl"), "--json", "--sweep"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document["parts"]) == {"tune", "unseen", "all"}
    everything = document["parts"]["all"]
    assert everything["answerable"] == 40 and everything["unanswerable"] == 40
    assert everything["gold_in_sources"] >= 0.8 and everything["answer_rate"] >= 0.5
    assert everything["citation_precision"] >= 0.7 and 0 <= everything["roc_auc"] <= 1
    assert everything["p95_ms"] >= everything["p50_ms"] > 0
    first = document["questions"][0]
    assert {"evidence_score", "reason", "signals", "cited", "part"} <= set(first) and first["reason"]
    sweep = document["sweep"]["tune"]
    assert sweep[0]["answer_rate"] == 1.0 and sweep[-1]["answer_rate"] <= sweep[0]["answer_rate"]


def test_calibrate_stores_a_model_that_keeps_the_target_answer_rate(normans, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAGKB_DATA_DIR", str(tmp_path))
    code = main(["calibrate", "--kb", "normans", "--questions", str(normans / "questions.jsonl"),
                 "--corpus", str(normans / "corpus.jsonl"), "--target-answer-rate", "0.9"])
    assert code == 0 and "stored in the config of knowledge base normans" in capsys.readouterr().out
    model = KnowledgeBaseCatalog(tmp_path).get("normans").generator.answerability["en"]
    assert 0 < model.threshold < 1 and len(model.weights) == len(model.features)
    code = main(["eval-answers", "--kb", "normans", "--questions", str(normans / "questions.jsonl"),
                 "--corpus", str(normans / "corpus.jsonl"), "--json"])
    tune = json.loads(capsys.readouterr().out)["parts"]["tune"]
    assert code == 0 and tune["answer_rate"] >= 0.85  # the threshold was set for 90% of the tune part


def test_a_missing_question_file_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAGKB_DATA_DIR", str(tmp_path))
    assert main(["eval-answers", "--kb", "k", "--questions", str(tmp_path / "nope.jsonl")]) == 1
    assert "no such file" in capsys.readouterr().err
