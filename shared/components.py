"""Built-in embedders and stores, and helpers that build them for a KB.

Every service that embeds or reads a store adds these factories to its own
registry (`add_storage`); its stage components (rerankers, generators) come
from its own package. The helpers take the caller's registry; tools and tests
that pass none get one with only these components.
"""

from __future__ import annotations

from pathlib import Path

from shared.registry import ComponentRegistry
from shared.config import EmbedderConfig, KBConfig, KeywordStoreConfig, Settings, VectorStoreConfig
from shared.embedders import BGEM3Embedder, Embedder, SentenceTransformerEmbedder
from shared.stores.base import KeywordStore, VectorStore


def sentence_transformers_embedder(config: EmbedderConfig) -> Embedder:
    return SentenceTransformerEmbedder(config.model, batch_size=config.batch_size, device=config.device,
                                       languages=config.languages)


def bge_m3_embedder(config: EmbedderConfig) -> Embedder:
    return BGEM3Embedder(config.model, batch_size=config.batch_size, device=config.device,
                         max_tokens=config.max_tokens, use_fp16=config.use_fp16, languages=config.languages)


def sqlite_fts5_store(config: KeywordStoreConfig, *, kb: str, settings: Settings, version: int) -> KeywordStore:
    from shared.stores.sqlite_fts import SqliteFtsKeywordStore

    return SqliteFtsKeywordStore(version_dir(settings, kb, version) / "keyword.sqlite", analyzer=config.analyzer)


def elasticsearch_store(config: KeywordStoreConfig, *, kb: str, settings: Settings, version: int) -> KeywordStore:
    from shared.stores.elasticsearch import ElasticsearchKeywordStore

    return ElasticsearchKeywordStore(config.hosts, kb=kb, index_prefix=config.index_prefix, analyzer=config.analyzer,
                                     request_timeout_s=config.request_timeout_s, max_retries=config.max_retries,
                                     refresh=config.refresh, shards=config.shards, replicas=config.replicas,
                                     version=version)


def milvus_store(config: VectorStoreConfig, *, kb: str, settings: Settings, embedder: Embedder,
                 version: int) -> VectorStore:
    from shared.stores.milvus import MilvusVectorStore

    uri = config.uri or str(settings.data_dir / "milvus.db")
    return MilvusVectorStore(uri, kb=kb, model_id=embedder.model_id, dimension=embedder.dimension,
                             index_type=config.index_type, metric=config.metric,
                             index_params=config.index_params, search_params=config.search_params,
                             timeout_s=config.timeout_s, search_consistency=config.search_consistency,
                             visibility_timeout_s=config.visibility_timeout_s,
                             sparse_encoder=embedder.sparse_documents if getattr(embedder, "sparse", False) else None,
                             version=version, mirror_rows=settings.vector_mirror_rows)


def kb_dir(settings: Settings, kb: str) -> Path:
    return settings.data_dir / "kbs" / kb


def version_dir(settings: Settings, kb: str, version: int) -> Path:
    """Version 1 keeps the folder a KB had before versions existed."""
    return kb_dir(settings, kb) if version == 1 else kb_dir(settings, kb) / f"v{version}"


def add_storage(registry: ComponentRegistry) -> ComponentRegistry:
    """Add the embedders and stores to a service's registry."""
    return (registry.add("embedder", "sentence-transformers", sentence_transformers_embedder)
            .add("embedder", "bge-m3", bge_m3_embedder)
            .add("keyword_store", "sqlite-fts5", sqlite_fts5_store)
            .add("keyword_store", "elasticsearch", elasticsearch_store)
            .add("vector_store", "milvus", milvus_store))


def storage_registry(service: str = "") -> ComponentRegistry:
    return add_storage(ComponentRegistry(service))


def embedder_for(kb: KBConfig, registry: ComponentRegistry | None = None) -> Embedder:
    config = kb.embedder
    return (registry or storage_registry()).create("embedder", config.name, config,
                                                   cache_key=(config.model_dump_json(),))


def keyword_store_for(kb: KBConfig, settings: Settings, registry: ComponentRegistry | None = None) -> KeywordStore:
    config = kb.keyword_store
    return (registry or storage_registry()).create(
        "keyword_store", config.name, config, kb=kb.name, settings=settings, version=kb.index_version,
        cache_key=(kb.name, kb.index_version, str(settings.data_dir), config.model_dump_json()))


def vector_store_for(kb: KBConfig, settings: Settings, registry: ComponentRegistry | None = None) -> VectorStore:
    registry = registry or storage_registry()
    config = kb.vector_store
    embedder = embedder_for(kb, registry)
    return registry.create("vector_store", config.name, config, kb=kb.name, settings=settings, embedder=embedder,
                           version=kb.index_version,
                           cache_key=(kb.name, kb.index_version, str(settings.data_dir), config.model_dump_json(),
                                      embedder.model_id, embedder.dimension))
