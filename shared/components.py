"""Built-in embedders and stores, registered by name, and helpers that build them for a KB.

Services register their own stage components (rerankers, generators, chunkers)
in their own packages; this module holds what more than one service needs.
"""

from __future__ import annotations

from pathlib import Path

from shared import registry
from shared.config import EmbedderConfig, KBConfig, KeywordStoreConfig, Settings, VectorStoreConfig
from shared.embedders import BGEM3Embedder, Embedder, SentenceTransformerEmbedder
from shared.stores.base import KeywordStore, VectorStore


@registry.register("embedder", "sentence-transformers")
def _sentence_transformers(config: EmbedderConfig) -> Embedder:
    return SentenceTransformerEmbedder(config.model, batch_size=config.batch_size, device=config.device,
                                       languages=config.languages)


@registry.register("embedder", "bge-m3")
def _bge_m3(config: EmbedderConfig) -> Embedder:
    return BGEM3Embedder(config.model, batch_size=config.batch_size, device=config.device,
                         max_tokens=config.max_tokens, use_fp16=config.use_fp16, languages=config.languages)


@registry.register("keyword_store", "sqlite-fts5")
def _sqlite_fts5(config: KeywordStoreConfig, *, kb: str, settings: Settings) -> KeywordStore:
    from shared.stores.sqlite_fts import SqliteFtsKeywordStore

    return SqliteFtsKeywordStore(kb_dir(settings, kb) / "keyword.sqlite", analyzer=config.analyzer)


@registry.register("keyword_store", "elasticsearch")
def _elasticsearch(config: KeywordStoreConfig, *, kb: str, settings: Settings) -> KeywordStore:
    from shared.stores.elasticsearch import ElasticsearchKeywordStore

    return ElasticsearchKeywordStore(config.hosts, kb=kb, index_prefix=config.index_prefix, analyzer=config.analyzer,
                                     request_timeout_s=config.request_timeout_s, max_retries=config.max_retries,
                                     refresh=config.refresh, shards=config.shards, replicas=config.replicas)


@registry.register("vector_store", "milvus")
def _milvus(config: VectorStoreConfig, *, kb: str, settings: Settings, embedder: Embedder) -> VectorStore:
    from shared.stores.milvus import MilvusVectorStore

    uri = config.uri or str(settings.data_dir / "milvus.db")
    return MilvusVectorStore(uri, kb=kb, model_id=embedder.model_id, dimension=embedder.dimension,
                             index_type=config.index_type, metric=config.metric,
                             index_params=config.index_params, search_params=config.search_params,
                             timeout_s=config.timeout_s, search_consistency=config.search_consistency,
                             sparse_encoder=embedder.sparse_documents if getattr(embedder, "sparse", False) else None)


def kb_dir(settings: Settings, kb: str) -> Path:
    return settings.data_dir / "kbs" / kb


def embedder_for(kb: KBConfig) -> Embedder:
    config = kb.embedder
    return registry.create("embedder", config.name, config, cache_key=(config.model_dump_json(),))


def keyword_store_for(kb: KBConfig, settings: Settings) -> KeywordStore:
    config = kb.keyword_store
    return registry.create("keyword_store", config.name, config, kb=kb.name, settings=settings,
                           cache_key=(kb.name, str(settings.data_dir), config.model_dump_json()))


def vector_store_for(kb: KBConfig, settings: Settings) -> VectorStore:
    config = kb.vector_store
    embedder = embedder_for(kb)
    return registry.create("vector_store", config.name, config, kb=kb.name, settings=settings, embedder=embedder,
                           cache_key=(kb.name, str(settings.data_dir), config.model_dump_json(),
                                      embedder.model_id, embedder.dimension))
