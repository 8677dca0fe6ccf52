"""Token counts and unknown-token shares read on the embedder's own copy of its tokenizer (shared/embedders.py)."""

from concurrent import futures

import pytest

from shared.embedders import SentenceTransformerEmbedder

TEXTS = ["The AMR-7 carries 120 kg at 1.5 m/s.", "机器人在仓库里搬运货物，最大载重一百二十公斤。",
         "a [UNK] b", "ünïcödé Zürich façade", ""]


@pytest.fixture(scope="module")
def embedder():
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


def test_counts_are_the_model_tokenizers_counts_first_read_and_cached(embedder):
    tokenizer = embedder._model.tokenizer
    expected = [len(tokenizer(t, add_special_tokens=True, truncation=False)["input_ids"]) for t in TEXTS]
    assert [embedder.count_tokens(t) for t in TEXTS] == expected
    assert [embedder.count_tokens(t) for t in TEXTS] == expected  # answered from the kept counts
    assert embedder.unknown_token_share("a [UNK] b") == pytest.approx(1 / 3)


def test_reads_do_not_wait_for_a_forward_pass(embedder):
    """A pass holds the model's lock for as long as it runs; a query's context budget must not queue behind it."""
    text = "a question nobody counted before"
    expected = len(embedder._model.tokenizer(text, add_special_tokens=True)["input_ids"])
    with futures.ThreadPoolExecutor(2) as pool, embedder._lock:  # as a forward pass holds it
        count = pool.submit(embedder.count_tokens, text)
        share = pool.submit(embedder.unknown_token_share, "ein Satz mit 未知 tokens ☃")
        assert count.result(timeout=30) == expected
        assert 0 <= share.result(timeout=30) < 1


def test_concurrent_reads_and_passes_all_answer_correctly(embedder):
    texts = [f"chunk {i}: the robot moved {i} pallets, 第{i}次" for i in range(200)]
    tokenizer = embedder._model.tokenizer
    expected = [len(tokenizer(t, add_special_tokens=True, truncation=False)["input_ids"]) for t in texts]
    with futures.ThreadPoolExecutor(8) as pool:
        passes = [pool.submit(embedder.embed_documents, texts[i:i + 20]) for i in range(0, 200, 20)]
        counts = list(pool.map(embedder.count_tokens, texts))
        assert all(p.result().shape == (20, embedder.dimension) for p in passes)
    assert counts == expected


def test_kept_counts_are_bounded(embedder, monkeypatch):
    monkeypatch.setattr(type(embedder), "TOKEN_COUNT_CACHE", 16)
    for i in range(100):
        embedder.count_tokens(f"text number {i}")
    assert len(embedder._token_counts) <= 16
    assert embedder.count_tokens("text number 3") == len(
        embedder._model.tokenizer("text number 3", add_special_tokens=True)["input_ids"])
