"""The scale benchmark (scripts/bench/scale.py) at a tiny size on the embedded engines: its output's shape.

Timings are the benchmark's business; this checks that it builds the KB through the stores, that the
seeded corpus is the same on every run, and that every measurement and growth exponent is reported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

BENCH = ROOT / "scripts" / "bench"
sys.path.insert(0, str(BENCH))
import scale  # noqa: E402

pytestmark = pytest.mark.integration

SIZE_KEYS = {"ingest_chunks_s", "keyword_chunks_s", "vector_chunks_s", "bm25_p50_ms", "bm25_p95_ms", "dense_p50_ms",
             "dense_p95_ms", "retrieve_p50_ms", "retrieve_p95_ms", "recall10", "vector_rss_mb", "keyword_disk_mb",
             "vector_disk_mb"}


def test_corpus_is_seeded_zipfian_and_bilingual():
    corpus = scale.SyntheticCorpus(7, 16, 0.3, "kb", vocabulary_chars=200_000)
    chunks, vectors = corpus.block(3)
    again, same_vectors = scale.SyntheticCorpus(7, 16, 0.3, "kb", vocabulary_chars=200_000).block(3)
    assert [c.content for c in chunks] == [c.content for c in again]
    assert np.array_equal(vectors, same_vectors)
    assert [c.chunk_id for c in chunks][:2] == ["c00003000", "c00003001"]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    chinese = [c for c in chunks if " " not in c.content]
    assert 0.2 < len(chinese) / len(chunks) < 0.4
    assert all(any("\u4e00" <= ch <= "\u9fff" for ch in c.content) for c in chinese)
    words = [w for c in chunks if " " in c.content for w in c.content.split()]
    counts = sorted(np.unique(words, return_counts=True)[1], reverse=True)
    # Zipf: the most frequent word is far more frequent than the hundredth, and a long tail occurs once
    assert counts[0] > 20 * counts[99] and counts[-1] == 1


def test_growth_exponent_is_the_log_log_slope():
    assert scale.exponent([10, 100, 1000], [3.0, 30.0, 300.0]) == pytest.approx(1.0)
    assert scale.exponent([10, 100], [5.0, 5.0]) == pytest.approx(0.0)


def test_bench_reports_every_size_and_exponent(tmp_path):
    """The first step through the stores' `upsert`, the second through their bulk-load path; at each size the
    last 1,000 chunks are written again through `upsert` (the probe of the stores' own rate)."""
    out = tmp_path / "scale.jsonl"
    run = subprocess.run(
        [sys.executable, str(BENCH / "scale.py"), "--engines", "embedded", "--sizes", "1000,2000", "--batch", "1000",
         "--bulk-above", "1000", "--upsert-probe", "1000",
         "--queries", "12", "--warmup", "2", "--vocabulary-chars", "200000", "--out", str(out),
         "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["chunks"], r["write_path"]) for r in rows if r["kind"] == "size"] == [(1000, "upsert"), (2000, "bulk")]
    for row in rows:
        assert SIZE_KEYS <= row.keys()
        assert row["upsert_probe_chunks"] == 1000 and row["upsert_probe_chunks_s"] > 0
        # the vector store's probe time split: writes, the wait until searchable, the index catching up
        assert {"upsert_probe_vector_write_s", "upsert_probe_visible_s", "upsert_probe_index_catchup_s"} <= row.keys()
        assert 0.0 <= row["recall10"] <= 1.0
        # Milvus Lite searches exactly
        assert row["recall10"] == pytest.approx(1.0)
        assert row["keyword_disk_mb"] > 0 and row["vector_disk_mb"] > 0
        # the embedded keyword store's memory is its in-memory BM25 index, in this process
        assert 0 < row["keyword_rss_mb"] < row["process_rss_mb"]
        # and the dense route's vector mirror, built by the first search: at least the rows' float32 vectors
        assert row["chunks"] * 384 * 4 / 2**20 < row["vector_mirror_mb"] < row["process_rss_mb"]
    for metric in ("BM25 p95 ms", "dense p95 ms", "retrieve p95 ms", "vector disk MB"):
        line = next(line for line in run.stdout.splitlines() if line.startswith(metric))
        assert len(line.split()) == len(metric.split()) + 3  # two sizes and the exponent
    assert "per million chunks (1,000 -> 2,000)" in run.stdout
