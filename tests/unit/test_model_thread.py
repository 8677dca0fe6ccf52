"""Every forward pass of a process runs on its one model thread (shared/model_thread.py)."""

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import threading

import grpc
import numpy as np
import pytest

from shared import model_thread
from shared.cross_encoder import CrossEncoder
from shared.embedders import SentenceTransformerEmbedder
from tests.tiny_cross_encoder import build_tiny_cross_encoder

pytestmark = pytest.mark.unit


def run_from_threads(function, count: int = 6) -> list:
    """`function()` from `count` threads alive at once (so none shares another's thread id)."""
    results, errors = [], []
    together = threading.Barrier(count)

    def call():
        try:
            together.wait(30)
            results.append(function())
        except Exception as error:  # surfaced below: a failing thread must fail the test
            errors.append(error)

    threads = [threading.Thread(target=call) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and len(results) == count
    return results


def test_calls_from_many_threads_all_run_on_one_thread_that_is_none_of_theirs():
    ran_on = run_from_threads(lambda: (threading.get_ident(), model_thread.run(threading.get_ident)))
    callers = {caller for caller, _ in ran_on}
    model_threads = {ran for _, ran in ran_on}
    assert len(callers) == 6 and len(model_threads) == 1 and not model_threads & callers
    assert model_thread.run(threading.get_ident) in model_threads  # and the main thread's calls too


def test_the_function_s_result_and_its_exception_reach_the_caller():
    assert model_thread.run(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(ValueError, match="bad batch"):
        model_thread.run(lambda: (_ for _ in ()).throw(ValueError("bad batch")))


def test_a_call_made_on_the_model_thread_runs_in_place_instead_of_waiting_for_itself():
    outer = model_thread.run(lambda: (threading.get_ident(), model_thread.run(threading.get_ident)))
    assert outer[0] == outer[1]


def _child_runs(results) -> None:
    results.put(model_thread.run(lambda: threading.current_thread().name))


def test_a_forked_child_gets_a_model_thread_of_its_own():
    model_thread.run(threading.get_ident)  # the parent's thread exists before the fork
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_child_runs, args=(results,))
    child.start()
    child.join(30)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child's model call never returned (the parent's dead thread was waited for)")
    assert child.exitcode == 0
    assert results.get(timeout=5).startswith(model_thread.THREAD_NAME_PREFIX)


def forward_threads(module) -> list[str]:
    """Names of the threads the module's forward passes run on (a forward pre-hook on the real model)."""
    names: list[str] = []
    module.register_forward_pre_hook(lambda *_: names.append(threading.current_thread().name))
    return names


def test_minilm_passes_for_queries_and_documents_from_any_thread_run_on_the_model_thread():
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    names = forward_threads(embedder._model)
    queries = run_from_threads(lambda: embedder.embed_query("what does the model thread do?"))
    documents = run_from_threads(lambda: embedder.embed_documents(["one chunk", "another, longer chunk of text"]), 3)
    assert names and {name.split("_")[0] for name in names} == {model_thread.THREAD_NAME_PREFIX}
    assert all(np.allclose(vector, queries[0], atol=1e-6) for vector in queries)
    assert all(batch.shape == (2, embedder.dimension) for batch in documents)


def test_reranker_passes_run_on_the_model_thread(tmp_path):
    reranker = CrossEncoder(str(build_tiny_cross_encoder(tmp_path / "tiny-reranker")), device="cpu", batch_size=4,
                            max_length=64)
    names = forward_threads(reranker._model.model)
    scores = run_from_threads(lambda: reranker.score("query", ["first passage", "second passage"]), 3)
    assert names and {name.split("_")[0] for name in names} == {model_thread.THREAD_NAME_PREFIX}
    assert all(score == scores[0] for score in scores) and len(scores[0]) == 2


@contextlib.contextmanager
def another_call_in_flight():
    """A second thread inside `model_thread.serving()` while the block runs."""
    inside, leave = threading.Event(), threading.Event()

    def another_call():
        with model_thread.serving():
            inside.set()
            leave.wait(30)

    other = threading.Thread(target=another_call)
    other.start()
    assert inside.wait(30)
    try:
        yield
    finally:
        leave.set()
        other.join(30)


def test_nested_calls_in_one_thread_count_once_and_threads_count_each():
    assert model_thread.calls_in_flight() == 0
    with model_thread.serving():
        with model_thread.serving():  # an in-process call runs in its caller's thread
            assert model_thread.calls_in_flight() == 1
        with another_call_in_flight():
            assert model_thread.calls_in_flight() == 2
        assert model_thread.calls_in_flight() == 1
    assert model_thread.calls_in_flight() == 0


def test_a_request_s_pass_runs_single_threaded_only_while_several_calls_are_in_flight():
    import torch

    def threads_of(run) -> int:
        return run(torch.get_num_threads)

    configured = threads_of(model_thread.run)
    with model_thread.serving():
        assert threads_of(model_thread.run_for_request) == configured  # one call: the configured team
        with another_call_in_flight():
            assert threads_of(model_thread.run_for_request) == 1 == model_thread.pass_threads()
            assert threads_of(model_thread.run) == configured  # a bulk pass (ingest) keeps the team
            assert threads_of(model_thread.run_for_request) == 1
        assert threads_of(model_thread.run_for_request) == configured == model_thread.pass_threads()


def test_served_rpcs_count_as_calls_in_flight_while_their_handler_runs():
    from shared.server import ServiceInterceptor

    seen = []
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: seen.append(model_thread.calls_in_flight()))
    details = type("Details", (), {"method": "/ragkb.Probe/Call", "invocation_metadata": ()})()
    wrapped = ServiceInterceptor("probe").intercept_service(lambda _: handler, details)

    class Context:
        def time_remaining(self):
            return None

    wrapped.unary_unary(object(), Context())
    assert seen == [1] and model_thread.calls_in_flight() == 0


ENTRY_POINTS = ["services.parser.main", "services.indexer.main", "services.retriever.main", "services.reranker.main",
                "services.generator.main", "services.gateway.main", "services.worker.main", "ragkb.cli"]
WAIT_POLICY_PROBE = """
import importlib, json, os, sys
importlib.import_module(sys.argv[1])
with open("/proc/self/maps") as maps:
    gomp_loaded = "libgomp" in maps.read()
print(json.dumps({"policy": os.environ.get("OMP_WAIT_POLICY"), "torch": "torch" in sys.modules, "gomp": gomp_loaded}))
"""


def _wait_policy_after_import(module: str, env: dict) -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | env
    done = subprocess.run([sys.executable, "-c", WAIT_POLICY_PROBE, module], env=environment, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_entry_point_sets_a_passive_wait_policy_before_openmp_loads(module):
    # libgomp reads OMP_WAIT_POLICY once, when torch loads it: the default must be in place by then
    seen = _wait_policy_after_import(module, {})
    assert seen == {"policy": "PASSIVE", "torch": False, "gomp": False}


def test_an_operators_wait_policy_is_kept():
    assert _wait_policy_after_import("services.retriever.main", {"OMP_WAIT_POLICY": "ACTIVE"})["policy"] == "ACTIVE"
