"""Process settings (from the environment) and knowledge-base configuration (YAML).

Settings are read once at start-up into a frozen object; nothing reads the
environment at import time. Every key is listed by `Settings.env_keys()`; the
deployment manifests declare each of them (a test checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.errors import InvalidArgument

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Settings:
    """Where each service listens and where data lives. Env var = RAGKB_ + upper-case field."""

    data_dir: Path = Path.home() / ".ragkb"
    host: str = "127.0.0.1"
    parser_addr: str = "127.0.0.1:50051"
    indexer_addr: str = "127.0.0.1:50052"
    retriever_addr: str = "127.0.0.1:50053"
    reranker_addr: str = "127.0.0.1:50054"
    generator_addr: str = "127.0.0.1:50055"
    gateway_grpc_addr: str = "127.0.0.1:50050"
    http_port: int = 8780
    rpc_timeout_s: float = 30.0
    ingest_workers: int = 2
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> Settings:
        env = os.environ if environ is None else environ
        values = {}
        for field in fields(cls):
            key = f"RAGKB_{field.name.upper()}"
            if field.name in overrides:
                values[field.name] = overrides[field.name]
            elif key in env:
                raw = env[key]
                try:
                    values[field.name] = _coerce(field.type, raw)
                except ValueError as error:
                    raise ValueError(f"{key}={raw!r} is not a valid {field.type}: {error}") from None
        return cls(**values)

    @staticmethod
    def env_keys() -> list[str]:
        return [f"RAGKB_{field.name.upper()}" for field in fields(Settings)]

    def port_of(self, addr: str) -> int:
        return int(addr.rsplit(":", 1)[1])


def _coerce(type_name: str, raw: str):
    if type_name == "Path":
        return Path(raw).expanduser()
    if type_name == "int":
        return int(raw)
    if type_name == "float":
        return float(raw)
    return raw


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChunkerConfig(_Section):
    name: Literal["structure", "fixed"] = "structure"
    max_chars: int = Field(800, ge=100, le=20000)
    overlap_chars: int = Field(120, ge=0, le=2000)
    min_section_chars: int = Field(160, ge=0, le=5000)


class EmbedderConfig(_Section):
    name: str = "sentence-transformers"
    model: str = "all-MiniLM-L6-v2"  # a shipped model name or a local directory
    batch_size: int = Field(32, ge=1, le=1024)
    device: str = "cpu"
    languages: tuple[str, ...] = ("en",)  # languages the model understands; others get a lower dense weight


class KeywordStoreConfig(_Section):
    name: str = "sqlite-fts5"
    analyzer: Literal["jieba", "char"] = "jieba"


class VectorStoreConfig(_Section):
    name: str = "milvus"
    uri: str = ""  # empty = Milvus Lite file under the data directory
    index_type: str = "AUTOINDEX"
    metric: Literal["COSINE", "IP", "L2"] = "COSINE"


class RetrieverConfig(_Section):
    top_k: int = Field(8, ge=1, le=200)
    candidate_depth: int = Field(40, ge=1, le=1000)
    rrf_k: int = Field(60, ge=1)
    bm25_weight: float = Field(1.0, ge=0)
    dense_weight: float = Field(1.0, ge=0)
    # dense weight used when the query's language is not one the embedder declares
    dense_weight_foreign_language: float = Field(0.2, ge=0)
    route_timeout_s: float = Field(10.0, gt=0)


class RerankerConfig(_Section):
    name: str = "passthrough"
    top_n: int = Field(5, ge=1, le=100)


class GeneratorConfig(_Section):
    name: str = "extractive"
    max_sentences: int = Field(3, ge=1, le=20)
    min_evidence_score: float = Field(0.0, ge=0)
    refusal_en: str = "No relevant knowledge was found for this question."
    refusal_zh: str = "知识库中没有找到与该问题相关的内容。"


class KBConfig(_Section):
    """One knowledge base: every component it uses, chosen by name."""

    name: str
    description: str = ""
    chunker: ChunkerConfig = ChunkerConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    keyword_store: KeywordStoreConfig = KeywordStoreConfig()
    vector_store: VectorStoreConfig = VectorStoreConfig()
    retriever: RetrieverConfig = RetrieverConfig()
    reranker: RerankerConfig = RerankerConfig()
    generator: GeneratorConfig = GeneratorConfig()

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        validate_kb_name(value)
        return value

    @classmethod
    def from_yaml(cls, text: str, *, name: str | None = None) -> KBConfig:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise InvalidArgument(f"knowledge base config is not valid YAML: {error}") from None
        if not isinstance(data, dict):
            raise InvalidArgument("knowledge base config must be a YAML mapping")
        if name is not None:
            data["name"] = name
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise InvalidArgument(f"invalid knowledge base config: {problems}") from None

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def validate_kb_name(name: str) -> None:
    if not name or len(name) > 64 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
        raise InvalidArgument(
            f"invalid knowledge base name {name!r}: use 1-64 ASCII letters, digits, '-' or '_'"
        )
