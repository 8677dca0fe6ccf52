"""The retrieval regression gate on a real embedded KB (SQLite FTS5, Milvus Lite, all-MiniLM-L6-v2)."""

import hashlib
import json

import pytest

from ragkb.gate import configure_kb
from shared import components
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition
from shared.kb import KnowledgeBaseCatalog

pytestmark = pytest.mark.unit

DOCS = {
    "dock-1": "The charging dock charges the battery from 20% to 80% in 45 minutes.",
    "dock-2": "A full battery charge on the charging dock takes 90 minutes.",
    "dock-3": "The robot drives to a free charging dock when its battery falls to 20%.",
    "lidar": "Wipe the lidar window with a dry microfiber cloth.",
    "zones": "Draw a polygon with the Zones tool to set a no-go zone.",
    "keys": "Create an API key under Settings, Integrations.",
}


@pytest.fixture()
def kb(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("\n".join(json.dumps(q) for q in [
        {"query": "charging dock battery", "relevant": ["dock-1", "dock-2", "dock-3"]},
        {"query": "battery charging dock minutes", "relevant": ["dock-1", "dock-2", "dock-3"]},
    ]), encoding="utf-8")
    # the operator's side: a model it offers (for the embedder-change test)
    settings.data_dir.mkdir(parents=True)
    (settings.data_dir / "profiles.yaml").write_text("models: {bge-m3: /models/bge-m3}\n", encoding="utf-8")
    catalog.create("gated", config_yaml="retriever: {max_ndcg_drop: 0.01}")
    # the golden file is a path on the server: set by the operator's tools, never by a tenant's KB config
    tenant = catalog.tenant_config("gated")
    config = catalog.replace(tenant.model_copy(update={
        "retriever": tenant.retriever.model_copy(update={"golden_questions": str(golden)})}))
    chunks = [chunk_pb2.KnowledgeChunk(chunk_id=hashlib.sha256(d.encode()).hexdigest()[:32], doc_id=d, kb="gated",
                                       namespace="default", content=text, raw_content=text)
              for d, text in DOCS.items()]
    components.keyword_store_for(config, settings).upsert(chunks)
    components.vector_store_for(config, settings).upsert(
        chunks, components.embedder_for(config).embed_documents([c.content for c in chunks]))
    return settings, catalog, config


def test_a_change_that_loses_ndcg_is_refused_unless_forced(kb):
    settings, catalog, config = kb
    shallow = config.model_copy(update={"retriever": config.retriever.model_copy(update={"candidate_depth": 1})})
    with pytest.raises(FailedPrecondition, match="nDCG@10 on .* drops from"):
        configure_kb(settings, "gated", shallow.to_tenant_yaml(), ["default"])
    assert catalog.get("gated").retriever.candidate_depth == 40  # nothing stored
    report = configure_kb(settings, "gated", shallow.to_tenant_yaml(), ["default"], force=True)
    stored = catalog.get("gated").retriever
    assert report["ndcg@10_after"] < report["ndcg@10_before"] - 0.01
    assert stored.candidate_depth == 1 and stored.gate.forced
    assert stored.gate.ndcg10_after == pytest.approx(report["ndcg@10_after"])


def test_a_harmless_change_passes_and_records_its_measurement(kb):
    settings, catalog, config = kb
    deeper = config.model_copy(update={"retriever": config.retriever.model_copy(update={"candidate_depth": 50})})
    report = configure_kb(settings, "gated", deeper.to_tenant_yaml(), ["default"])
    gate = catalog.get("gated").retriever.gate
    assert report["gated"] and not gate.forced and gate.ndcg10_after >= gate.ndcg10_before - 0.01
    described = catalog.get("gated").model_copy(update={"description": "robots"})
    assert not configure_kb(settings, "gated", described.to_tenant_yaml(), ["default"])["gated"]  # no retrieval change


def test_an_embedder_change_needs_a_new_version(kb):
    settings, _, config = kb
    other = config.model_copy(update={"embedder": config.embedder.model_copy(update={"model": "bge-m3"})})
    with pytest.raises(FailedPrecondition, match="needs a new version of the knowledge base"):
        configure_kb(settings, "gated", other.to_tenant_yaml(), ["default"])
