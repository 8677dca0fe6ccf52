"""KB versions (shared/kb_versions.py): the same numbering, moves and switch on SQLite and on PostgreSQL.
A second repository built from the same settings stands for another process."""

from __future__ import annotations

import threading

import pytest

from shared.errors import FailedPrecondition, NotFound
from shared.kb_versions import BUILDING, DROPPED, FAILED, LIVE, READY, RETIRED, VersionRows


def test_a_kb_without_rows_is_adopted_as_version_1_once(settings):
    rows, other = VersionRows.for_settings(settings), VersionRows.for_settings(settings)
    assert rows.list("docs") == []
    rows.adopt("docs", "name: docs\n")
    other.adopt("docs", "changed: later\n")  # a second adoption changes nothing
    (first,) = other.list("docs")
    assert (first.version, first.state, first.config_yaml) == (1, LIVE, "name: docs\n")
    with pytest.raises(NotFound):
        rows.get("docs", 2)


def test_versions_are_numbered_built_switched_and_retired(settings):
    rows, other = VersionRows.for_settings(settings), VersionRows.for_settings(settings)
    rows.adopt("docs", "v1")
    second = rows.create("docs", lambda number: f"v{number}")
    assert (second.version, second.state, second.config_yaml) == (2, BUILDING, "v2")
    with pytest.raises(FailedPrecondition, match="already has version 2 building"):
        other.create("docs", lambda number: f"v{number}")
    rows.plan("docs", 2, [[("default", "a"), ("default", "b")], [("team", "c")], [("default", "d")]])
    other.plan("docs", 2, [[("default", "x")]])  # planned once: a resumed build keeps its batches
    assert other.pending_batches("docs", 2) == [0, 1, 2] and other.batch("docs", 2, 1) == [("team", "c")]
    rows.finish_batch("docs", 2, 0)
    other.finish_batch("docs", 2, 0)  # a redelivered job counts once
    rows.finish_batch("docs", 2, 2)
    assert other.pending_batches("docs", 2) == [1]
    assert (other.get("docs", 2).docs_done, other.get("docs", 2).docs_total) == (3, 4)
    with pytest.raises(NotFound, match="no re-index batch 7"):
        rows.batch("docs", 2, 7)
    with pytest.raises(FailedPrecondition, match="is building and cannot become live"):
        rows.move("docs", 2, LIVE)
    rows.move("docs", 2, READY)
    assert [v.version for v in other.held("docs")] == [1, 2]
    refused = {"outcome": "refused", "before": {"hybrid": 0.9}, "after": {"hybrid": 0.4}}
    rows.decide("docs", 2, refused)  # a refused gate: the decision is kept, the state stays
    assert (other.get("docs", 2).state, other.get("docs", 2).decision) == (READY, refused)
    decision = {"outcome": "switched", "before": {"ndcg@10": 0.5}, "after": {"ndcg@10": 0.6}}
    assert rows.switch("docs", 2, decision) == 1
    assert {v.version: v.state for v in other.list("docs")} == {1: RETIRED, 2: LIVE}
    assert other.get("docs", 2).decision == decision
    assert rows.switch("docs", 1) == 2  # rollback: a retired version comes back
    assert {v.version: v.state for v in other.list("docs")} == {1: LIVE, 2: RETIRED}
    rows.move("docs", 2, DROPPED)
    assert [v.version for v in other.held("docs")] == [1]
    with pytest.raises(FailedPrecondition, match="is not ready or retired"):
        rows.switch("docs", 2)
    third = rows.create("docs", lambda number: f"v{number}")
    assert third.version == 3  # numbers are never reused, also after a drop
    rows.move("docs", 3, FAILED, error="embedder crashed")
    assert other.get("docs", 3).error == "embedder crashed" and other.held("docs")[0].version == 1
    assert rows.list("other") == []  # versions belong to one KB


def test_two_switches_at_once_leave_exactly_one_live_version(settings):
    rows = VersionRows.for_settings(settings)
    rows.adopt("docs", "v1")
    rows.create("docs", lambda number: f"v{number}")
    rows.move("docs", 2, READY)
    outcomes: list[str] = []

    def switch(version: int) -> None:
        try:
            VersionRows.for_settings(settings).switch("docs", version)
            outcomes.append("switched")
        except FailedPrecondition:
            outcomes.append("refused")

    threads = [threading.Thread(target=switch, args=(2,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 3 + ["switched"]  # the version is live after the first
    assert [v.version for v in rows.list("docs") if v.state == LIVE] == [2]
