"""Gateway runtime on the embedded stack: traces, live step settings, optional steps, metrics, gRPC errors,
the LangChain adapter and the /debug test bench in headless Chromium (Debian chromium + chromedriver, Selenium)."""

import json
import shutil

import grpc
import pytest
import yaml

from ragkb.client import RagkbApiError
from ragkb.langchain import RagkbRetriever
from shared.contracts import gateway_pb2, gateway_pb2_grpc
from tests.conftest import LEXICAL_ANSWERABILITY, ROOT, SAMPLES

pytestmark = pytest.mark.integration

KB = "bench"
EN_QUESTION = "How long does it take to charge the AMR-7 from 20% to 80%?"
ZH_QUESTION = "AMR-7 的最大载重是多少？"
ARTIFACTS = ROOT / "artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,2200", "--lang=zh-CN"]


@pytest.fixture(scope="module")
def kb(client):
    # the steps and traces are what these tests check: the gate is the lexical one, so the HyDE draft over the
    # first three retrieved passages is not refused by the shipped answerability model's margin signals
    client.create_kb(KB, config_yaml=f"generator: {{answerability: {json.dumps(LEXICAL_ANSWERABILITY)}}}")
    jobs = [client.upload(KB, name, (SAMPLES / name).read_bytes())["job_id"]
            for name in ("en/amr7-user-guide.md", "zh/amr7-使用手册.md")]
    assert {j["state"] for j in client.wait(jobs, timeout_s=300)} == {"done"}
    return KB


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.fail("chromium and chromedriver are required (scripts/test.sh installs the Debian packages)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def steps(client):
    """Each test starts from the default step settings and leaves them so."""
    client.set_steps({})
    yield client
    client.set_steps({})


def test_trace_has_every_list_with_scores_and_ranks(client, kb, steps):
    result = client.query(kb, EN_QUESTION, top_k=6)
    trace = client.trace(result["trace_id"])
    lists = trace["lists"]
    assert lists["bm25"] and lists["dense"] and lists["fused"] and lists["reranked"]
    assert [e["rank"] for e in lists["bm25"]] == list(range(1, len(lists["bm25"]) + 1))
    assert all(e["bm25_score"] > 0 for e in lists["bm25"])
    assert all(e["dense_rank"] > 0 for e in lists["dense"])
    fused_ids = [e["chunk_id"] for e in lists["fused"]]
    assert [e["chunk_id"] for e in lists["reranked"]] == [c["chunk"]["chunk_id"] for c in result["chunks"]]
    assert set(e["chunk_id"] for e in lists["reranked"]) | set(e["chunk_id"] for e in lists["dropped"]) <= set(fused_ids)
    assert all(e["reason"] for e in lists["dropped"])
    assert trace["counts"]["fused"] == len(fused_ids) and trace["request"]["query"] == EN_QUESTION
    assert len(trace["request"]["kb_version"]) == 16  # the version of the KB config that answered
    assert [s["name"] for s in trace["stages"]] == ["pre-retrieval", "retrieval", "post-retrieval", "generation"]
    assert trace["answer"] == result["answer"] and "45 minutes" in trace["answer"]
    with pytest.raises(RagkbApiError) as missing:
        client.trace("0" * 32)
    assert missing.value.status == 404


def test_replay_runs_the_traced_request_again(client, kb, steps):
    first = client.query(kb, ZH_QUESTION)
    replay = client.replay(first["trace_id"])
    assert replay["replay_of"] == first["trace_id"]
    assert replay["trace"]["trace_id"] != first["trace_id"] and replay["trace"]["request"]["query"] == ZH_QUESTION
    assert replay["result"]["answer"] == first["answer"] and "300公斤" in first["answer"]


def test_toggling_a_step_changes_the_next_request_without_restart(client, kb, steps, stack):
    assert client.query(kb, EN_QUESTION)["answer"]
    client.set_steps({"generation": {"enabled": False}})
    off = client.query(kb, EN_QUESTION)
    assert off["answer"] == "" and off["chunks"]
    assert off["stages"]["generation"]["metadata"]["generator"] == "off"
    # the same through the file the gateway watches
    steps_file = stack.settings.data_dir / "steps.yaml"
    steps_file.write_text(yaml.safe_dump({"steps": {"generation": {"enabled": True,
                                                                   "skip_when": {"languages": ["zh"]}}}}))
    assert client.query(kb, EN_QUESTION)["answer"]
    assert client.query(kb, ZH_QUESTION)["answer"] == ""
    steps_file.write_text("steps: [not, a, mapping]\n")
    with pytest.raises(RagkbApiError, match="must be a mapping") as invalid:
        client.reload_steps()
    assert invalid.value.status == 400
    assert client.steps()["steps"]["generation"]["skip_when"]["languages"] == ["zh"]  # last good settings kept


def test_retrieval_reads_vectors_and_split_parts_only_for_the_steps_that_use_them(client, kb, steps):
    def reads(result: dict) -> set[str]:
        stages = result["stages"]["retrieval"]["metadata"]
        return {read for read in ("chunk_vectors", "split_parts") if f"{read}_ms" in stages}

    question = "What does error code E101 mean?"
    assert reads(client.query(kb, question)) == {"chunk_vectors", "split_parts"}
    client.set_steps({"generation": {"enabled": False}})
    assert reads(client.query(kb, question)) == {"split_parts"}
    client.set_steps({"rerank": {"enabled": False}})
    assert reads(client.query(kb, question)) == {"chunk_vectors"}
    client.set_steps({"rerank": {"enabled": False}, "generation": {"enabled": False}})
    result = client.query(kb, question)
    assert result["chunks"] and not reads(result)


def test_optional_steps_apply_and_fail_soft(client, kb, steps):
    client.set_steps({"query_rewrite": {"enabled": True}, "multi_query": {"enabled": True},
                      "hyde": {"enabled": True, "timeout_s": 30}})
    result = client.query(kb, "Could you please tell me how long charging from 20% to 80% takes? Thanks!")
    trace = client.trace(result["trace_id"])
    notes = {n["step"]: n for n in trace["step_notes"]}
    assert {notes[s]["status"] for s in ("query_rewrite", "multi_query", "hyde")} == {"applied"}
    assert result["effective_query"] == "how long charging from 20% to 80% takes?"
    assert trace["extra_queries"] and set(trace["lists"]["variants"]) == set(trace["extra_queries"])
    assert int(result["stages"]["retrieval"]["metadata"]["queries"]) == 1 + len(trace["extra_queries"])
    assert "45 minutes" in result["answer"]
    client.set_steps({"hyde": {"enabled": True, "timeout_s": 0.0001}, "multi_query": {"enabled": True,
                                                                                       "skip_when": {"languages": ["zh"]}}})
    soft = client.query(kb, ZH_QUESTION)
    notes = {n["step"]: n for n in client.trace(soft["trace_id"])["step_notes"]}
    assert notes["hyde"]["status"] == "failed" and "timed out" in notes["hyde"]["detail"]
    assert notes["multi_query"] == {**notes["multi_query"], "status": "skipped", "detail": "query language is zh"}
    assert "300公斤" in soft["answer"]


def test_metrics_expose_stage_latency_errors_and_ingestion(client, kb, steps):
    client.query(kb, EN_QUESTION)
    with pytest.raises(RagkbApiError):
        client.query("no-such-kb", EN_QUESTION)
    text = client.metrics()
    assert 'ragkb_stage_latency_seconds_count{stage="generation"}' in text
    assert 'ragkb_stage_errors_total{error="NotFound",stage="retrieval"}' in text
    assert 'ragkb_ingest_jobs{state="done"} 2.0' in text


def test_grpc_errors_carry_their_status_and_stage(stack, kb):
    with grpc.insecure_channel(stack.settings.gateway_grpc_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        with pytest.raises(grpc.RpcError) as empty:
            stub.Query(gateway_pb2.QueryRequest(kb=kb, query="   "), timeout=30)
        assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "[pre-retrieval]" in empty.value.details()
        with pytest.raises(grpc.RpcError) as missing:
            stub.Query(gateway_pb2.QueryRequest(kb="no-such-kb", query="hello"), timeout=30)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND and "[retrieval]" in missing.value.details()


def test_langchain_retriever_returns_the_final_chunks(client, kb, steps):
    retriever = RagkbRetriever(kb=kb, client=client, top_k=4)
    documents = retriever.invoke(EN_QUESTION)
    assert documents and any("45 minutes" in d.page_content for d in documents)
    first = documents[0].metadata
    assert first["doc_id"] == "en/amr7-user-guide.md" and first["namespace"] == "default" and first["trace_id"]
    assert client.trace(first["trace_id"])["lists"]["reranked"][0]["chunk_id"] == first["chunk_id"]
    zh = RagkbRetriever(kb=kb, base_url=client.base_url).invoke(ZH_QUESTION)
    assert any("300公斤" in d.page_content for d in zh)


def test_debug_page_shows_every_list_timings_and_the_answer(browser, stack, kb, steps):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(f"{stack.http_url}/debug")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: kb in [o.text for o in Select(d.find_element(By.ID, "kb")).options])
    Select(browser.find_element(By.ID, "kb")).select_by_visible_text(kb)
    browser.find_element(By.ID, "query").send_keys("AMR-7 的最大载重是多少？")
    browser.find_element(By.ID, "run").click()
    wait.until(ready.visibility_of_element_located((By.ID, "answer")))
    wait.until(lambda d: d.find_element(By.ID, "answer").text.strip())

    assert "300公斤" in browser.find_element(By.ID, "answer").text
    for table in ("bm25", "dense", "fused", "reranked", "context"):
        rows = browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")
        assert rows and rows[0].find_elements(By.TAG_NAME, "td")[0].text != "—", table
    stages = [r.find_elements(By.TAG_NAME, "td")[0].text for r in browser.find_elements(By.CSS_SELECTOR, "#stages tbody tr")]
    assert stages == ["pre-retrieval", "retrieval", "post-retrieval", "generation"]
    assert browser.find_element(By.ID, "count_bm25").text.startswith("BM25: ")
    score = browser.find_element(By.CSS_SELECTOR, "#fused tbody tr td:nth-child(2)").text
    assert float(score) > 0
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "debug-page.png"))

    # errors are shown on the page, naming the stage
    browser.find_element(By.ID, "query").clear()
    browser.find_element(By.ID, "query").send_keys("   ")
    browser.find_element(By.ID, "run").click()
    wait.until(lambda d: d.find_element(By.ID, "error").text)
    assert "pre-retrieval" in browser.find_element(By.ID, "error").text
