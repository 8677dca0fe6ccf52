"""Dynamic micro-batching of query embeddings: concurrent queries share forward passes, results unchanged."""

import threading

import numpy as np
import pytest

from shared.embedders import QueryBatcher, SentenceTransformerEmbedder

pytestmark = pytest.mark.unit


def test_a_lone_query_is_encoded_at_once():
    batches = []
    batcher = QueryBatcher(lambda texts: batches.append(list(texts)) or np.array([[float(len(t))] for t in texts]))
    assert batcher.embed("abc")[0] == 3.0 and batches == [["abc"]]


def test_queries_waiting_for_the_model_share_one_forward_pass():
    started, release = threading.Event(), threading.Event()
    batches = []

    def encode(texts):
        batches.append(list(texts))
        if len(batches) == 1:  # hold the model while the others queue up
            started.set()
            release.wait(10)
        return np.array([[float(len(t))] for t in texts])

    batcher = QueryBatcher(encode, max_batch=4)
    results: dict[str, float] = {}
    first = threading.Thread(target=lambda: results.update(x=batcher.embed("x")[0]))
    first.start()
    started.wait(10)
    texts = ["aa", "bbb", "cccc", "ddddd", "eeeeee"]
    threads = [threading.Thread(target=lambda t=t: results.update({t: batcher.embed(t)[0]})) for t in texts]
    for thread in threads:
        thread.start()
    for _ in range(1000):  # until every caller has queued its text
        if len(batcher._queue) == len(texts):
            break
        threading.Event().wait(0.01)
    release.set()
    for thread in [first, *threads]:
        thread.join(10)
    assert results == {"x": 1.0} | {t: float(len(t)) for t in texts}  # every caller got its own vector
    assert batches[0] == ["x"] and sorted(len(b) for b in batches[1:]) == [1, 4]  # max_batch bounds a pass
    assert batcher.batches == 3


def test_a_failed_pass_fails_every_query_in_it_and_the_next_pass_runs():
    calls = []

    def encode(texts):
        calls.append(texts)
        if len(calls) == 1:
            raise RuntimeError("model crashed")
        return np.ones((len(texts), 1))

    batcher = QueryBatcher(encode)
    with pytest.raises(RuntimeError, match="model crashed"):
        batcher.embed("first")
    assert batcher.embed("second")[0] == 1.0


def test_minilm_query_vectors_are_the_same_batched_or_alone():
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    texts = ["how long does charging take", "最大载重是多少", "error code E101", "a much longer question " * 8]
    alone = np.stack([embedder.embed_documents([t])[0] for t in texts])
    vectors: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda i=i, t=t: vectors.__setitem__(i, embedder.embed_query(t)))
               for i, t in enumerate(texts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert np.allclose(np.stack([vectors[i] for i in range(len(texts))]), alone, atol=1e-5)
