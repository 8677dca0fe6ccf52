"""The bge-m3 path: BGEM3FlagModel from a local directory, dense + sparse into Milvus Lite, three routes fused.

The model is a tiny random one built here (tests/tiny_m3.py); the stores are the real
embedded ones (SQLite FTS5, Milvus Lite).
"""

import hashlib

import numpy as np
import pytest

from services.retriever.retriever import Retriever
from shared import components
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.kb import KnowledgeBaseCatalog
from tests.tiny_m3 import build_tiny_m3

pytestmark = pytest.mark.unit

TEXTS = {
    "charging": "The charging dock charges the battery from 20% to 80% in 45 minutes.",
    "speed": "The top speed of the robot is 1.8 m/s in open aisles.",
    "payload": "AMR-7 的最大载重为300公斤。",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_m3(tmp_path_factory.mktemp("tiny-m3"))


@pytest.fixture()
def kb(tmp_path, model_dir):
    settings = Settings(data_dir=tmp_path)
    (tmp_path / "profiles.yaml").write_text(f"models: {{tiny-m3: '{model_dir}'}}\n", encoding="utf-8")
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    config = catalog.create("m3", config_yaml="embedder: {name: bge-m3, model: tiny-m3, batch_size: 2}")
    chunks = [chunk_pb2.KnowledgeChunk(chunk_id=hashlib.sha256(doc.encode()).hexdigest()[:32], doc_id=doc, kb="m3",
                                       namespace="default", content=text, raw_content=text)
              for doc, text in TEXTS.items()]
    embedder = components.embedder_for(config)
    components.keyword_store_for(config, settings).upsert(chunks)
    components.vector_store_for(config, settings).upsert(chunks, embedder.embed_documents([c.content for c in chunks]))
    retriever = Retriever(settings)
    yield retriever, embedder, catalog.get("m3")
    retriever.close()


def test_bge_m3_gives_normalised_dense_vectors_and_sparse_weights(kb):
    _, embedder, _ = kb
    vectors = embedder.embed_documents(list(TEXTS.values()))
    assert vectors.shape == (3, embedder.dimension) and embedder.dimension == 32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    weights = embedder.sparse_query("battery charging")
    assert weights and all(isinstance(t, int) and w > 0 for t, w in weights.items())
    assert embedder.count_tokens("battery charging") >= 2 and embedder.unknown_token_share("battery") == 0


def test_lexical_weights_are_a_third_route_fused_with_the_others(kb):
    retriever, _, config = kb
    result = retriever.retrieve(config, "charging battery", chunk_pb2.SearchFilter(namespaces=["default"]), top_k=3)
    assert not result.degraded
    assert "charging" in [c.chunk.doc_id for c in result.sparse]
    assert all(c.route == chunk_pb2.ROUTE_SPARSE and c.sparse_rank for c in result.sparse)
    # the same tokenizer reads the query for both model routes (this tiny model's is MiniLM's)
    assert set(result.weights) == {"bm25", "dense", "sparse"}
    assert result.competence["sparse"] == result.competence["dense"] > 0
    fused = {c.chunk.doc_id: c for c in result.candidates}
    assert fused["charging"].sparse_rank > 0 and fused["charging"].bm25_rank == 1
    assert "sparse.top_z" in result.signals
