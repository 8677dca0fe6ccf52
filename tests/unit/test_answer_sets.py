"""The development question sets of scripts/bench/answer_sets.py: the "siblings" construction, where a
question's answer passage is left out of the index while the other passages of its topic stay."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import answer_sets  # noqa: E402

pytestmark = pytest.mark.unit


def test_passages_cut_between_sentences_in_both_languages():
    english = "The Rhine is long. It flows north. Cologne lies on it! Is it wide? Yes, 400 m."
    assert answer_sets.passages(english, 40) == ["The Rhine is long. It flows north.", "Cologne lies on it! Is it wide?",
                                                 "Yes, 400 m."]
    chinese = "莱茵河很长。它向北流。科隆位于河畔！河宽四百米。"
    assert answer_sets.passages(chinese, 13) == ["莱茵河很长。它向北流。", "科隆位于河畔！河宽四百米。"]
    assert answer_sets.passages("One sentence longer than the limit.", 5) == ["One sentence longer than the limit."]


def _asked(count: int) -> tuple[dict, list]:
    """`count` paragraphs of four passages; one question on each passage, whose answer only it holds."""
    paragraphs, asked = {}, []
    for p in range(count):
        facts = [f"Fact {k} of topic {p} is answer{p}x{k}." for k in range(4)]
        paragraphs[f"P{p}"] = (f"Topic {p}", " ".join(facts))
        asked += [(f"q{p}-{k}", f"What is fact {k} of topic {p}?", f"P{p}", [f"answer{p}x{k}"]) for k in range(4)]
    return paragraphs, asked


def test_siblings_leave_out_answer_passages_and_keep_their_topic():
    paragraphs, asked = _asked(20)
    corpus, questions = answer_sets.siblings("test", paragraphs, asked, "en", 40, per_kind=1000)
    indexed = {entry["_id"]: entry["text"] for entry in corpus}
    answerable = [q for q in questions if q["answerable"]]
    unanswerable = [q for q in questions if not q["answerable"]]
    assert 20 < len(answerable) < 60 and 20 < len(unanswerable) < 60
    for question in answerable:
        assert question["gold_doc_ids"] and all(
            any(a in indexed[d] for a in question["gold_answers"]) for d in question["gold_doc_ids"])
    for question in unanswerable:
        paragraph = question["group"]
        kept = [text for doc, text in indexed.items() if doc.startswith(paragraph + "#")]
        answer = next(a for qid, _, _, answers in asked if f"test-{qid}" == question["id"] for a in answers)
        assert kept, "its topic's other passages stay in the index"
        assert not any(answer in text for text in indexed.values()), "its answer is nowhere in the index"
        assert question["gold_doc_ids"] == [] and question["gold_answers"] == []
    assert all(q["group"] == q["id"].split("-")[1].replace("q", "P") for q in questions)


def test_siblings_skip_questions_whose_topic_is_gone_or_whose_answer_spans_passages():
    paragraphs = {"P0": ("Topic", "Only one passage holds answer0."),
                  "P1": ("Topic", "First half of the answer is spread. Across two passages here.")}
    asked = [("q0", "What?", "P0", ["answer0"]), ("q1", "What?", "P1", ["spread. Across"])]
    corpus, questions = answer_sets.siblings("test", paragraphs, asked, "en", 40, per_kind=10)
    if any(entry["_id"] == "P0#0" for entry in corpus):
        assert [q["id"] for q in questions] == ["test-q0"] and questions[0]["answerable"]
    else:
        assert questions == [], "an unanswerable question needs a passage of its topic left in the index"
