"""KB versions on the embedded engines (SQLite FTS5, Milvus Lite): a re-embed with another embedder under
query load, writes during the build, the gate, rollback, retention and drop.

The second embedder is a tiny random bge-m3 model built here (tests/tiny_m3.py): 32-d against MiniLM's
384-d, so a query embedded by one version's model can only be answered by that version's collection.
"""

from __future__ import annotations

import pytest

from ragkb.client import RagkbApiError, RagkbClient
from services.gateway.auth import key_store_for
from services.indexer.reconciler import PeriodicReconciler
from services.indexer.versions import INDEX_SECTIONS
from shared.config import KBConfig, Settings
from shared.errors import FailedPrecondition, InvalidArgument
from shared.stores.milvus import milvus_client
from shared.kb_versions import BUILDING, DROPPED, FAILED, LIVE, READY, RETIRED
from tests.integration.versions_support import DOCS, Indexing, QueryLoad, retrieving, write_golden
from tests.tiny_m3 import build_tiny_m3

pytestmark = pytest.mark.integration

RE_EMBED = "embedder: {name: bge-m3, model: tiny-m3, batch_size: 4}\n"
LOAD = ["battery charging dock", "top speed aisles", "lifting module kilograms", "laser scanner person"]


@pytest.fixture(scope="module")
def tiny_m3(tmp_path_factory):
    return build_tiny_m3(tmp_path_factory.mktemp("tiny-m3"))


@pytest.fixture()
def settings(tmp_path, tiny_m3):
    settings = Settings(data_dir=tmp_path / "data")
    settings.data_dir.mkdir()
    (settings.data_dir / "profiles.yaml").write_text(f"models: {{tiny-m3: '{tiny_m3}'}}\n", encoding="utf-8")
    return settings


@pytest.fixture()
def kb(settings):
    indexing = Indexing.build(settings)
    indexing.catalog.create("manual")
    for doc_id, text in DOCS.items():
        indexing.index("manual", doc_id, text)
    return indexing


def states(indexing: Indexing) -> dict[int, str]:
    return {v.version: v.state for v in indexing.versions.list("manual")}


def test_a_re_embed_under_query_load_answers_every_query_from_old_then_new(kb, settings):
    with QueryLoad(LOAD, retrieving(settings, "manual")) as load:
        load.wait_for(5)
        version = kb.versions.create("manual", RE_EMBED)
        assert (version.version, version.state) == (2, BUILDING)
        kb.versions.start_build("manual", 2)
        # written while version 2 is built: each write reaches both versions
        kb.index("manual", "late", "The docking station glows green when the battery is full.")
        kb.indexer.delete_document(kb.catalog.get("manual"), "default", "wifi")
        built = kb.versions.wait("manual", 2, timeout_s=300)
        assert built.state == READY, built.error
        assert built.docs_total >= len(DOCS) - 1 and built.docs_done == built.docs_total
        load.wait_for(5)
        switched = kb.versions.switch("manual", 2)
        load.wait_for(10)
    assert load.failures == []
    assert switched.state == LIVE and switched.decision == {"outcome": "switched", "gated": False, "forced": False}
    assert states(kb) == {1: RETIRED, 2: LIVE}
    # every query answered by version 1 until the switch, by version 2 after it, never back
    assert load.answered == sorted(load.answered) and set(load.answered) == {1, 2}
    live = kb.catalog.get("manual")
    assert (live.index_version, live.embedder.name) == (2, "bge-m3")
    embedder, _, vector = kb.stores_of("manual", 2)
    assert embedder.dimension == vector.dimension == 32
    expected = (set(DOCS) | {"late"}) - {"wifi"}
    assert kb.doc_ids("manual", 2) == expected == kb.doc_ids("manual", 1)


def test_rollback_is_instant_keeps_later_writes_and_retention_drops_the_oldest(kb):
    kb.versions.create("manual", RE_EMBED)
    kb.versions.build("manual", 2)
    kb.versions.switch("manual", 2)
    kb.index("manual", "after", "Firmware updates install overnight while the robot charges.")
    written = kb.registry.counts("manual")
    rolled = kb.versions.rollback("manual")
    assert rolled.version == 1 and states(kb) == {1: LIVE, 2: RETIRED}
    assert kb.catalog.get("manual").index_version == 1 and kb.catalog.get("manual").embedder.name != "bge-m3"
    assert kb.registry.counts("manual") == written  # nothing re-indexed or lost: the retired version kept up
    assert "after" in kb.doc_ids("manual", 1) and "after" in kb.doc_ids("manual", 2)
    # forward again, then a third version: with retention 1 the oldest retired version is dropped
    kb.versions.rollback("manual", to=2)
    _, keyword, vector = kb.stores_of("manual", 1)
    kb.versions.create("manual", "keyword_store: {analyzer: char}\n" + RE_EMBED)
    kb.versions.build("manual", 3)
    kb.versions.switch("manual", 3)
    assert states(kb) == {1: DROPPED, 2: RETIRED, 3: LIVE}
    assert keyword.count() == 0 and not milvus_client(vector.uri).has_collection(vector.collection)
    assert kb.doc_ids("manual", 3) == kb.doc_ids("manual", 2) == set(DOCS) | {"after"}
    with pytest.raises(FailedPrecondition, match="not retired"):
        kb.versions.rollback("manual", to=1)


def test_a_failed_gate_leaves_the_old_version_live_and_stores_both_metric_rows(kb, settings, tmp_path):
    golden = write_golden(tmp_path / "golden.jsonl")
    operator = kb.catalog.tenant_config("manual")
    kb.catalog.replace(operator.model_copy(update={"retriever": operator.retriever.model_copy(
        update={"golden_questions": str(golden), "max_ndcg_drop": 0.0})}))
    kb.versions.create("manual", RE_EMBED)  # a random model: the paraphrases are found by MiniLM only
    kb.versions.build("manual", 2)
    with pytest.raises(FailedPrecondition, match="refused: nDCG@10 .* the live version stays"):
        kb.versions.switch("manual", 2)
    assert states(kb) == {1: LIVE, 2: READY} and kb.catalog.get("manual").index_version == 1
    decision = kb.versions.get("manual", 2).decision
    assert decision["outcome"] == "refused" and decision["before"]["version"] == 1
    assert decision["after"]["version"] == 2 and decision["before"]["hybrid"] > decision["after"]["hybrid"]
    assert set(decision["before"]) >= {"bm25", "dense", "hybrid"}
    forced = kb.versions.switch("manual", 2, force=True)
    assert forced.state == LIVE and forced.decision["forced"] and forced.decision["outcome"] == "switched"


def test_versions_refuse_what_they_cannot_do(kb):
    with pytest.raises(InvalidArgument, match="a version sets only .* retriever belong to the knowledge base"):
        kb.versions.create("manual", "retriever: {top_k: 3}\n")
    with pytest.raises(InvalidArgument, match="changes none of"):
        kb.versions.create("manual", "embedder: {name: sentence-transformers}\n")
    with pytest.raises(InvalidArgument, match="; index_version belong to the knowledge base"):
        kb.versions.create("manual", "index_version: 9\nembedder: {model: tiny-m3}\n")
    with pytest.raises(InvalidArgument, match="is not offered by this server"):
        kb.versions.create("manual", "embedder: {model: /etc/passwd}\n")
    with pytest.raises(InvalidArgument, match="operator setting"):
        kb.versions.create("manual", "keyword_store: {hosts: ['http://evil:9200']}\n")
    kb.versions.create("manual", RE_EMBED)
    with pytest.raises(FailedPrecondition, match="already has version 2 building"):
        kb.versions.create("manual", RE_EMBED)
    with pytest.raises(FailedPrecondition, match="only a ready or a retired version"):
        kb.versions.switch("manual", 2)
    with pytest.raises(FailedPrecondition, match="only a ready, retired or failed version"):
        kb.versions.drop("manual", 1)
    with pytest.raises(FailedPrecondition, match="no retired version"):
        kb.versions.rollback("manual")
    with pytest.raises(InvalidArgument, match="index_version is set by the version commands"):
        kb.catalog.create("other", config_yaml="index_version: 5\n")


def test_a_build_that_cannot_finish_fails_and_the_live_version_stays(kb, settings, tiny_m3):
    kb.versions.create("manual", RE_EMBED)
    profiles = settings.data_dir / "profiles.yaml"
    profiles.write_text("models: {tiny-m3: '/nonexistent'}\n", encoding="utf-8")  # the operator moved the model
    failed = kb.versions.build("manual", 2)
    assert failed.state == FAILED and "/nonexistent" in failed.error
    assert states(kb) == {1: LIVE, 2: FAILED} and kb.catalog.get("manual").index_version == 1
    with pytest.raises(FailedPrecondition, match="only a ready or a retired version"):
        kb.versions.switch("manual", 2, force=True)
    profiles.write_text(f"models: {{tiny-m3: '{tiny_m3}'}}\n", encoding="utf-8")
    assert kb.versions.drop("manual", 2).state == DROPPED
    assert kb.versions.create("manual", RE_EMBED).version == 3  # a number is never reused


def test_a_build_left_unfinished_by_a_stopped_indexer_resumes_on_start(kb, settings):
    kb.versions.create("manual", RE_EMBED)
    kb.versions.stop()  # the indexer stops before the build has run
    kb.versions.start_build("manual", 2)
    assert kb.versions.wait("manual", 2, timeout_s=300).state == BUILDING
    restarted = Indexing.build(settings)  # the next indexer process
    restarted.versions.resume_builds()
    resumed = restarted.versions.wait("manual", 2, timeout_s=300)
    assert resumed.state == READY and resumed.docs_done == resumed.docs_total == len(DOCS)
    assert restarted.doc_ids("manual", 2) == set(DOCS)


def test_only_a_kb_admin_over_every_namespace_changes_versions(stack, client):
    """Through the embedded stack's REST API: a version holds every namespace of the KB."""
    client.create_kb("guarded")
    store = key_store_for(stack.settings)
    keys = {"writer": store.create("versions-writer", role="writer", namespaces=["*"]),
            "team": store.create("versions-team", role="kb_admin", namespaces=["default"]),
            "admin": store.create("versions-admin", role="kb_admin", namespaces=["*"])}
    try:
        callers = {name: RagkbClient(stack.http_url, api_key=key) for name, key in keys.items()}
        for name, message in (("writer", "this needs kb_admin"), ("team", "may access all of them")):
            caller = callers[name]
            for call in (lambda: caller.create_version("guarded", "keyword_store: {analyzer: char}\n"),
                         lambda: caller.switch_version("guarded", 1), lambda: caller.rollback("guarded"),
                         lambda: caller.drop_version("guarded", 1)):
                with pytest.raises(RagkbApiError, match=message):
                    call()
            (listed,) = caller.list_versions("guarded")  # reading is allowed; configs only for a kb_admin
            assert (listed["version"], listed["state"], bool(listed["config_yaml"])) == (1, "live", name == "team")
        created = callers["admin"].create_version("guarded", "keyword_store: {analyzer: char}\n")
        assert created["state"] == "building" and "analyzer: char" in created["config_yaml"]
        with pytest.raises(RagkbApiError, match="operator setting"):
            callers["admin"].create_version("guarded", "vector_store: {uri: 'http://attacker:19530'}\n")
    finally:
        for name in ("versions-writer", "versions-team", "versions-admin"):
            store.delete(name)


def catalog_switched_to(indexing: Indexing, version: int) -> None:
    """The first steps of a switch that stops before moving the rows: the catalog names `version` (its index
    sections and number over the live config), as `VersionManager._go_live` writes it."""
    stored = KBConfig.from_yaml(indexing.versions.get("manual", version).config_yaml, name="manual").tenant_view()
    live = indexing.catalog.tenant_config("manual")
    indexing.catalog.replace(live.model_copy(update={section: getattr(stored, section)
                                                     for section in (*INDEX_SECTIONS, "index_version")}))


def test_a_switch_interrupted_after_the_catalog_write_is_completed_on_start_and_repeats_are_no_ops(kb, settings):
    kb.versions.create("manual", RE_EMBED)
    kb.versions.build("manual", 2)
    catalog_switched_to(kb, 2)  # the process stopped here: queries answer from version 2, the rows say 1
    assert states(kb) == {1: LIVE, 2: READY}
    restarted = Indexing.build(settings)  # the next indexer process
    restarted.versions.repair_every_live()
    assert states(restarted) == {1: RETIRED, 2: LIVE}
    # repeating the switch (the operator did not see it finish) or a rollback to the live version changes nothing
    assert restarted.versions.switch("manual", 2).state == LIVE
    assert restarted.versions.rollback("manual", to=2).state == LIVE
    assert states(restarted) == {1: RETIRED, 2: LIVE} and restarted.catalog.get("manual").index_version == 2
    # the same interruption found by the next switch instead of a restart
    catalog_switched_to(restarted, 1)
    assert restarted.versions.rollback("manual", to=1).state == LIVE
    assert states(restarted) == {1: LIVE, 2: RETIRED}


def test_retention_by_time_drops_a_retired_version_once_its_time_is_up(kb, settings):
    kb.versions.create("manual", RE_EMBED)
    kb.versions.build("manual", 2)
    kb.versions.switch("manual", 2)
    _, keyword, vector = kb.stores_of("manual", 1)
    # a count of 5 keeps version 1; within an hour's retention time it stays as well
    within = Indexing.build(settings, retention=5, retention_s=3600)
    within.versions.apply_retention()
    assert states(within) == {1: RETIRED, 2: LIVE}
    # the same version once retired for longer than the retention time: dropped with its index
    expired = Indexing.build(settings, retention=5, retention_s=0.001)
    expired.versions.apply_retention()
    assert states(expired) == {1: DROPPED, 2: LIVE}
    assert keyword.count() == 0 and not milvus_client(vector.uri).has_collection(vector.collection)
    with pytest.raises(ValueError, match="retention time must be >= 0 seconds"):
        Indexing.build(settings, retention_s=-1)


def test_a_mirrored_write_that_failed_for_a_retired_or_ready_version_is_repaired(kb, settings):
    kb.versions.create("manual", RE_EMBED)
    kb.versions.build("manual", 2)
    kb.versions.switch("manual", 2)
    kb.index("manual", "after", "Firmware updates install overnight while the robot charges.")
    # what a mirrored write that failed leaves: the retired version lacks the document
    _, keyword, vector = kb.stores_of("manual", 1)
    lost = sorted(keyword.chunk_ids("default", "after"))
    keyword.delete_ids(lost)
    vector.delete_ids(lost)
    assert "after" not in kb.doc_ids("manual", 1)
    schedule = PeriodicReconciler(kb.reconciler, kb.catalog, 3600, configs_of=kb.versions.held_configs,
                                  after_round=kb.versions.apply_retention)
    schedule.run_once()  # the indexer's scheduled round reconciles every complete version
    assert "after" in kb.doc_ids("manual", 1) and "after" in kb.doc_ids("manual", 2)
    # a ready version is reconciled when switched: a write lost since its build is restored first
    kb.versions.create("manual", "keyword_store: {analyzer: char}\n" + RE_EMBED)
    kb.versions.build("manual", 3)
    _, keyword, vector = kb.stores_of("manual", 3)
    keyword.delete_ids(lost)
    vector.delete_ids(lost)
    assert kb.versions.switch("manual", 3).state == LIVE
    assert kb.doc_ids("manual", 3) == kb.doc_ids("manual", 2)
