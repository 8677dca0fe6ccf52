"""Process settings (from the environment) and knowledge-base configuration (YAML).

Settings are read once at start-up into a frozen object; nothing reads the
environment at import time. Every key is listed by `Settings.env_keys()`; the
deployment manifests declare each of them (a test checks).
"""

from __future__ import annotations

import fnmatch
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
    # gateway: API keys (no file = auth off), live step settings, stored traces, OpenTelemetry exporter
    keys_file: str = ""  # empty = <data_dir>/keys.yaml
    steps_file: str = ""  # empty = <data_dir>/steps.yaml
    trace_limit: int = 1000  # traces kept; the oldest are deleted
    otel_exporter: str = ""  # "", none, console or otlp
    # ingestion: empty broker = in-process queue (embedded); redis://... = Celery workers
    broker_url: str = ""
    worker_addr: str = "127.0.0.1:50056"  # the worker's gRPC health endpoint
    ingest_namespace_slots: int = 2  # jobs of one namespace queued or running at once (fairness)
    ingest_step_timeout_s: float = 600.0  # deadline of each pipeline step (parse, index)
    reconcile_interval_s: float = 3600.0  # scheduled store/registry reconciliation; 0 = off

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
    # token-safe pass, counted with the embedder's own tokenizer: 0 = the model's own input limit
    max_tokens: int = Field(0, ge=0, le=32768)
    token_margin: int = Field(16, ge=0, le=1024)  # kept free below the limit


class ChunkerRule(_Section):
    """Chunker settings for the files whose path matches `glob` (fnmatch; a glob without '/' matches the name)."""

    glob: str = Field(min_length=1)
    name: Literal["structure", "fixed"] | None = None
    max_chars: int | None = None
    overlap_chars: int | None = None
    min_section_chars: int | None = None
    max_tokens: int | None = None
    token_margin: int | None = None

    def matches(self, filename: str) -> bool:
        path = filename.replace("\\", "/").lstrip("/")
        target = path if "/" in self.glob else path.rsplit("/", 1)[-1]
        return fnmatch.fnmatchcase(target, self.glob)


class ParserConfig(_Section):
    """Limits and OCR for parsing a knowledge base's files."""

    ocr: bool = False  # scanned PDFs are read with tesseract; off = they are refused as image-only
    ocr_languages: tuple[str, ...] = ("chi_sim", "eng")
    max_file_mb: float = Field(50.0, gt=0, le=60)  # the gRPC message limit is 64 MB
    max_pages: int = Field(2000, ge=1, le=100000)
    timeout_s: float = Field(300.0, gt=0, le=3600)  # per file; the parse worker is killed after it
    allow_copy_protected: bool = False  # true = read PDFs whose owner forbids copying text


class EmbedderConfig(_Section):
    name: str = "sentence-transformers"
    model: str = "all-MiniLM-L6-v2"  # a shipped model name or a local directory
    batch_size: int = Field(32, ge=1, le=1024)
    device: str = "cpu"
    languages: tuple[str, ...] = ("en",)  # languages the model understands; others get a lower dense weight


class KeywordStoreConfig(_Section):
    name: str = "sqlite-fts5"  # sqlite-fts5 (embedded) | elasticsearch
    analyzer: Literal["jieba", "char"] = "jieba"
    # elasticsearch: nodes, index naming (<prefix>-kb-<kb>), fail-fast client behaviour, write visibility
    hosts: tuple[str, ...] = ("http://127.0.0.1:9200",)
    index_prefix: str = "ragkb"
    request_timeout_s: float = Field(5.0, gt=0, le=300)
    max_retries: int = Field(2, ge=0, le=10)  # on connection errors and 429/502/503/504
    refresh: Literal["wait_for", "true", "false"] = "wait_for"  # wait_for: a written chunk is searchable on return
    shards: int = Field(1, ge=1, le=64)
    replicas: int = Field(0, ge=0, le=8)


class VectorStoreConfig(_Section):
    name: str = "milvus"
    uri: str = ""  # empty = Milvus Lite file under the data directory
    index_type: Literal["AUTOINDEX", "HNSW", "IVF_FLAT", "IVF_SQ8", "FLAT"] = "AUTOINDEX"
    metric: Literal["COSINE", "IP", "L2"] = "COSINE"
    index_params: dict[str, int] = {}  # e.g. HNSW {M: 16, efConstruction: 200}, IVF_FLAT {nlist: 128}
    search_params: dict[str, int] = {}  # e.g. HNSW {ef: 64}, IVF_FLAT {nprobe: 16}
    timeout_s: float = Field(5.0, gt=0, le=300)  # per server call, so a dead server fails the route fast
    # search consistency on a Milvus server (counts and deletes always read Strong). Session: this
    # process reads its own writes at ~3 ms; Strong: every process does, but each search waits for the
    # next time tick (~200 ms on Milvus 2.3.5)
    search_consistency: Literal["Session", "Strong", "Bounded", "Eventually"] = "Session"


class RetrieverConfig(_Section):
    top_k: int = Field(8, ge=1, le=200)
    candidate_depth: int = Field(40, ge=1, le=1000)
    # per-route depth overrides; 0 = candidate_depth
    bm25_depth: int = Field(0, ge=0, le=1000)
    dense_depth: int = Field(0, ge=0, le=1000)
    rrf_k: int = Field(60, ge=1)
    bm25_weight: float = Field(1.0, ge=0)
    dense_weight: float = Field(1.0, ge=0)
    # dense weight used when the query's language is not one the embedder declares
    dense_weight_foreign_language: float = Field(0.2, ge=0)
    route_timeout_s: float = Field(10.0, gt=0)


class RerankerConfig(_Section):
    name: str = "passthrough"  # passthrough | bge
    top_n: int = Field(5, ge=1, le=100)  # chunk budget: hits kept (a restored split block counts once)
    # bge: a FlagEmbedding cross-encoder (bge-reranker-base/-large, bge-reranker-v2-m3), hub name or local dir
    enabled: bool = True  # false = no cross-encoder scoring, recall order kept (assembly still runs)
    model: str = "BAAI/bge-reranker-base"
    device: str = "auto"  # auto = cuda when available, else cpu
    batch_size: int = Field(16, ge=1, le=1024)
    max_length: int = Field(512, ge=16, le=8192)
    use_fp16: bool = False
    candidate_cap: int = Field(25, ge=1, le=1000)  # candidates scored at most (the cost limit)
    min_score: float = Field(0.0, ge=0, le=1)  # absolute threshold on the normalised (sigmoid) score
    relative_threshold: float = Field(0.6, ge=0, le=1)  # keep score >= ratio x top score
    # assembly
    mmr_threshold: float = Field(0.85, gt=0, le=1)  # skip a chunk this similar (lexical cosine) to a kept one; 1 = off
    max_context_tokens: int = Field(3000, ge=64, le=200000)  # token budget, counted with the embedder's tokenizer
    restore_parts: bool = True  # a kept part of a split block brings its siblings, in order


class AnswerabilityModel(_Section):
    """A logistic model over named evidence signals and the probability below which the answer is refused."""

    features: tuple[str, ...] = Field(min_length=1)
    weights: tuple[float, ...]
    bias: float
    threshold: float = Field(ge=0, le=1)

    @field_validator("weights")
    @classmethod
    def _one_weight_per_feature(cls, value: tuple[float, ...], info) -> tuple[float, ...]:
        features = info.data.get("features", ())
        if len(value) != len(features):
            raise ValueError(f"{len(value)} weights for {len(features)} features")
        return value


class GeneratorConfig(_Section):
    name: str = "extractive"  # extractive (offline) | openai (any OpenAI-compatible chat API)
    max_sentences: int = Field(3, ge=1, le=20)
    # a floor under the calibrated answerability model (`answerability` below): refuse without calling the
    # model when the best source covers less than this share of the question's content terms
    min_evidence_score: float = Field(0.25, ge=0, le=1)
    templates_dir: str = ""  # a directory whose files override the built-in prompt templates
    # openai: base URL of an OpenAI-compatible server (OpenAI, vLLM, Ollama), model, key from the NAMED env var
    base_url: str = "http://127.0.0.1:11434/v1"
    model: str = ""
    api_key_env: str = ""  # empty = no Authorization header (local servers)
    temperature: float = Field(0.1, ge=0, le=2)
    max_tokens: int = Field(800, ge=1, le=32000)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    # claim check: each cited sentence scored against the chunks it cites
    # lexical+embedding and lexical also catch negation flips, number/unit mismatches, swapped entities, antonyms
    claim_check: Literal["lexical+embedding", "lexical", "cross-encoder", "nli", "llm", "off"] = "lexical+embedding"
    min_claim_support: float = Field(0.4, ge=0, le=1)
    unsupported_claims: Literal["flag", "drop"] = "flag"
    refusal_en: str = "No relevant knowledge was found for this question."
    refusal_zh: str = "知识库中没有找到与该问题相关的内容。"
    # answerability: per question language ("en", "zh"), written by `ragkb calibrate`; unset = shipped defaults
    answerability: dict[str, AnswerabilityModel] = {}
    nli_model: str = ""  # claim_check nli: a local sequence-classification model directory (entail/neutral/contradict)


class KBConfig(_Section):
    """One knowledge base: every component it uses, chosen by name."""

    name: str
    description: str = ""
    chunker: ChunkerConfig = ChunkerConfig()
    chunker_rules: tuple[ChunkerRule, ...] = ()  # first match wins; unset fields come from `chunker`
    parser: ParserConfig = ParserConfig()
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

    def chunker_for(self, filename: str) -> ChunkerConfig:
        """The chunker settings for one file: the first matching rule over the KB's default."""
        for rule in self.chunker_rules:
            if rule.matches(filename):
                overrides = rule.model_dump(exclude={"glob"}, exclude_none=True)
                return ChunkerConfig.model_validate({**self.chunker.model_dump(), **overrides})
        return self.chunker

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def validate_kb_name(name: str) -> None:
    if not name or len(name) > 64 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
        raise InvalidArgument(
            f"invalid knowledge base name {name!r}: use 1-64 ASCII letters, digits, '-' or '_'"
        )
