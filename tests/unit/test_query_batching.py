"""Dynamic micro-batching of query embeddings: concurrent queries share forward passes, results unchanged."""

import threading

import numpy as np
import pytest

from shared.embedders import QueryBatcher, SentenceTransformerEmbedder

pytestmark = pytest.mark.unit


def lengths(texts):
    return np.array([[float(len(t))] for t in texts])


def wait_until(condition) -> None:
    for _ in range(2000):
        if condition():
            return
        threading.Event().wait(0.005)
    raise AssertionError("condition not reached")


def test_a_lone_query_is_encoded_at_once():
    batches = []
    # an hour of allowed waiting: a lone query must not use any of it (its recent passes held one query)
    batcher = QueryBatcher(lambda texts: batches.append(list(texts)) or lengths(texts), max_wait_s=3600)
    assert batcher.embed("abc")[0] == 3.0 and batches == [["abc"]]
    assert batcher.embed("de")[0] == 2.0 and batches == [["abc"], ["de"]]


def test_queries_waiting_for_the_model_share_one_forward_pass():
    started, release = threading.Event(), threading.Event()
    batches = []

    def encode(texts):
        batches.append(list(texts))
        if len(batches) == 1:  # hold the model while the others queue up
            started.set()
            release.wait(10)
        return np.array([[float(len(t))] for t in texts])

    batcher = QueryBatcher(encode, max_batch=4, max_wait_s=0)
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


def held_passes(holds: set[int]):
    """An encoder whose passes numbered in `holds` (1-based) wait for `release`; `started[n]` is set as pass n begins."""
    batches: list[list[str]] = []
    started = {n: threading.Event() for n in holds}
    release = {n: threading.Event() for n in holds}

    def encode(texts):
        batches.append(list(texts))
        number = len(batches)
        if number in holds:
            started[number].set()
            release[number].wait(10)
        return lengths(texts)

    return encode, batches, started, release


def embed_in_thread(batcher: QueryBatcher, text: str, results: dict) -> threading.Thread:
    thread = threading.Thread(target=lambda: results.update({text: batcher.embed(text)[0]}))
    thread.start()
    return thread


def test_callers_of_a_finished_pass_return_while_the_next_pass_runs():
    encode, batches, started, release = held_passes({1, 3})
    batcher = QueryBatcher(encode, max_batch=2, max_wait_s=0)
    results: dict[str, float] = {}
    first = embed_in_thread(batcher, "x", results)
    started[1].wait(10)
    others = [embed_in_thread(batcher, text, results) for text in ("aa", "bbb", "cccc")]
    wait_until(lambda: len(batcher._queue) == 3)
    release[1].set()
    started[3].wait(10)  # pass 2 encoded "aa" and "bbb"; pass 3 ("cccc") now holds the model
    for thread in (first, *others[:2]):
        thread.join(10)
        assert not thread.is_alive()  # their vectors are ready: they do not wait for the model again
    assert results == {"x": 1.0, "aa": 2.0, "bbb": 3.0} and batches == [["x"], ["aa", "bbb"], ["cccc"]]
    release[3].set()
    others[2].join(10)
    assert results["cccc"] == 4.0


def after_a_shared_pass(texts: tuple[str, ...], max_wait_s: float):
    """A batcher whose second pass encoded `texts` together (they queued while "x" held the model):
    (batcher, its batches, each text's result)."""
    encode, batches, started, release = held_passes({1})
    batcher = QueryBatcher(encode, max_batch=8, max_wait_s=max_wait_s)
    results: dict[str, float] = {}
    first = embed_in_thread(batcher, "x", results)
    started[1].wait(10)
    concurrent = [embed_in_thread(batcher, text, results) for text in texts]
    wait_until(lambda: len(batcher._queue) == len(texts))
    release[1].set()
    for thread in (first, *concurrent):
        thread.join(10)
    assert batches == [["x"], list(texts)]
    return batcher, batches, results


def test_a_pass_waits_boundedly_for_as_many_queries_as_recent_passes_held():
    batcher, batches, results = after_a_shared_pass(("a", "bb", "ccc"), max_wait_s=3600)  # the last pass held 3
    # the next query waits for two more to arrive (up to max_wait_s), and the three share one pass
    waiting = embed_in_thread(batcher, "p", results)
    wait_until(lambda: batcher._encoding and batcher._queue)
    later = [embed_in_thread(batcher, "qq", results)]
    wait_until(lambda: len(batcher._queue) == 2)
    later.append(embed_in_thread(batcher, "rrr", results))
    for thread in (waiting, *later):
        thread.join(10)
        assert not thread.is_alive()
    assert sorted(batches[2]) == ["p", "qq", "rrr"] and len(batches) == 3
    assert results == {"x": 1.0, "a": 1.0, "bb": 2.0, "ccc": 3.0, "p": 1.0, "qq": 2.0, "rrr": 3.0}


def test_the_wait_is_bounded_by_max_wait_s():
    batcher, batches, _ = after_a_shared_pass(("a", "bb"), max_wait_s=0.01)
    assert batcher.embed("alone")[0] == 5.0  # recent passes held 2: it waited, then went alone
    assert batches[-1] == ["alone"]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_batch"):
        QueryBatcher(lengths, max_batch=0)
    with pytest.raises(ValueError, match="max_wait_s"):
        QueryBatcher(lengths, max_wait_s=-1)


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
    texts = ["how long does charging take", "最大载重是多少", "error code E101", "a much longer question " * 8,
             "Beacon 的遥测数据保留多久？", "pairing code validity", "", "固件 4.2 新增了什么功能"] * 2
    alone = np.stack([embedder.embed_documents([t])[0] for t in texts])
    vectors: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda i=i, t=t: vectors.__setitem__(i, embedder.embed_query(t)))
               for i, t in enumerate(texts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert np.allclose(np.stack([vectors[i] for i in range(len(texts))]), alone, atol=1e-5)
