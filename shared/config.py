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
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.errors import InvalidArgument
from shared.profiles import OperatorProfiles

DEFAULT_NAMESPACE = "default"
MAX_INDEX_VERSION = 100_000


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
    # embedded mode: services call each other in process (shared/inprocess.py); false = over loopback gRPC
    in_process_calls: bool = True
    # embedded Milvus Lite: dense searches of a collection of up to this many rows run on an exact copy of its
    # rows in this process (shared/stores/vector_mirror.py; a 384-d row's vector is 1.5 kB, its serialized chunk
    # comes on top: 5.8 kB a row on SciFact's abstracts, so ~0.55 GiB at the limit); 0 = off
    vector_mirror_rows: int = 100_000
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
    version_retention: int = 1  # retired KB versions kept for rollback after a switch; older ones are dropped
    version_retention_s: float = 0.0  # and a retired version is dropped once retired this long; 0 = no time limit
    # security (docs/security.md): operator profiles a KB config chooses from; mTLS between services
    profiles_file: str = ""  # empty = <data_dir>/profiles.yaml (built-in profiles when absent)
    tls_dir: str = ""  # ca.pem + <service>.pem/.key (`ragkb certs init`); empty = plaintext, loopback only
    insecure_inner: bool = False  # allow plaintext inner services on a non-loopback address (not for production)
    open_access: bool = False  # serve a gateway without API keys to non-loopback clients too
    max_json_bytes: int = 1024 * 1024  # largest JSON request body (413 above it)
    # cluster mode: control-plane state (catalog, registry, jobs + uploads, traces, keys) in PostgreSQL,
    # e.g. postgresql://ragkb:PASSWORD@postgres:5432/ragkb; empty = files under data_dir (embedded)
    database_url: str = ""

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
    if type_name == "bool":
        if raw.strip().lower() not in _BOOLEANS:
            raise ValueError("use true or false")
        return _BOOLEANS[raw.strip().lower()]
    return raw


_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False, "": False}


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
    ocr_languages: tuple[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{1,31}$")], ...] = ("chi_sim", "eng")
    max_file_mb: float = Field(50.0, gt=0, le=60)  # the gRPC message limit is 64 MB
    max_pages: int = Field(2000, ge=1, le=100000)
    timeout_s: float = Field(300.0, gt=0, le=3600)  # per file; the parse worker is killed after it
    allow_copy_protected: bool = False  # true = read PDFs whose owner forbids copying text
    # resource limits per file, each refused with its own reason code (services/parser/errors.py)
    max_unzipped_mb: float = Field(256.0, gt=0, le=4096)  # DOCX/PPTX/XLSX: decompressed size of the zip entries
    max_zip_entries: int = Field(10000, ge=1, le=1_000_000)
    max_elements: int = Field(200_000, ge=1, le=10_000_000)  # parsed elements; a spreadsheet cell counts as one
    max_chunks: int = Field(5000, ge=1, le=1_000_000)
    max_memory_mb: int = Field(2048, ge=64, le=65536)  # the parse worker's address-space growth for one file


class EmbedderConfig(_Section):
    name: str = "sentence-transformers"  # sentence-transformers | bge-m3 (FlagEmbedding BGEM3FlagModel, local dir)
    model: str = "all-MiniLM-L6-v2"  # a shipped model name or a local directory
    batch_size: int = Field(32, ge=1, le=1024)
    device: str = "cpu"
    languages: tuple[str, ...] = ("en",)  # declared languages (informational: fusion measures what the model reads)
    max_tokens: int = Field(8192, ge=16, le=8192)  # bge-m3: input limit (8192 is the model's own)
    use_fp16: bool = False  # bge-m3 on a GPU


class KeywordStoreConfig(_Section):
    name: str = "sqlite-fts5"  # sqlite-fts5 (embedded) | elasticsearch
    profile: str = "default"  # the operator's keyword_store profile: hosts and index prefix come from it
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
    profile: str = "default"  # the operator's vector_store profile: the uri comes from it
    uri: str = ""  # empty = Milvus Lite file under the data directory
    index_type: Literal["AUTOINDEX", "HNSW", "IVF_FLAT", "IVF_SQ8", "FLAT"] = "AUTOINDEX"
    metric: Literal["COSINE", "IP", "L2"] = "COSINE"
    index_params: dict[str, int] = {}  # e.g. HNSW {M: 16, efConstruction: 200}, IVF_FLAT {nlist: 128}
    search_params: dict[str, int] = {}  # e.g. HNSW {ef: 64}, IVF_FLAT {nprobe: 16}
    timeout_s: float = Field(5.0, gt=0, le=300)  # per server call, so a dead server fails the route fast
    # search consistency on a Milvus server (counts and deletes always read Strong). Bounded, Session, Eventually:
    # a search does not wait for a time tick (~3 ms), and the indexer reports a document written or deleted only once
    # searches at this level see it (read-your-writes paid at ingest). Strong: every search waits for the next
    # time tick (~200 ms on Milvus 2.3.5) and ingest does not wait.
    search_consistency: Literal["Session", "Strong", "Bounded", "Eventually"] = "Bounded"
    # how long the indexer waits for its writes to become visible at `search_consistency` before failing the job
    visibility_timeout_s: float = Field(30.0, gt=0, le=600)


class FusionTuning(_Section):
    """The measurement behind a KB's fusion settings (`ragkb tune`)."""

    questions: str  # the question file tuned on
    tuned_at: str  # ISO 8601, UTC
    tuning_queries: int = Field(ge=0)
    unseen_queries: int = Field(ge=0)
    # nDCG@10 per part ("tuning", "unseen") and row ("bm25", "dense", "hybrid", "hybrid_before")
    ndcg10: dict[str, dict[str, float]]


class GateRecord(_Section):
    """The regression gate's measurement of the configuration it let through (`ragkb kb configure`)."""

    golden_questions: str
    measured_at: str  # ISO 8601, UTC
    ndcg10_before: float
    ndcg10_after: float
    forced: bool = False


class RetrieverConfig(_Section):
    top_k: int = Field(8, ge=1, le=200)
    candidate_depth: int = Field(40, ge=1, le=1000)
    # per-route depth overrides; 0 = candidate_depth
    bm25_depth: int = Field(0, ge=0, le=1000)
    dense_depth: int = Field(0, ge=0, le=1000)
    rrf_k: int = Field(60, ge=1)
    # convex(zscore) with BM25 0.6 / dense 0.4 (below): at or above the best single route on every development
    # set, 0.73 nDCG@10 on SciFact with MiniLM (README, Hybrid retrieval); the shipped answerability model is
    # fitted on answers built on these sources, so a change here needs a re-fit (scripts/bench/answer_quality.py)
    bm25_weight: float = Field(1.2, ge=0)
    dense_weight: float = Field(0.8, ge=0)
    route_timeout_s: float = Field(10.0, gt=0)
    # fusion (services/retriever/fusion.py): weighted RRF, or a convex combination of normalised scores
    fusion: Literal["rrf", "convex"] = "convex"
    normalization: Literal["minmax", "zscore", "theoretical_min"] = "zscore"  # convex only
    # route competence (services/retriever/competence.py): each route weight is multiplied by a measured
    # competence in [0, 1]; dense is 0 when this share of the query's (or its hits') tokens is unknown to
    # the embedder's tokenizer, BM25 is full once this share of the query's terms occurs in its hits
    dense_max_unknown_share: float = Field(0.25, gt=0, le=1)
    bm25_min_term_coverage: float = Field(0.5, gt=0, le=1)
    sparse_weight: float = Field(1.0, ge=0)  # the sparse route (bge-m3 lexical weights), when the embedder has one
    tuning: FusionTuning | None = None  # written by `ragkb tune`: what the weights were fitted on, and how well
    # regression gate: with a golden question file (ragkb tune format), a retriever config change is
    # refused when nDCG@10 on it drops by more than max_ndcg_drop, unless forced
    golden_questions: str = ""
    max_ndcg_drop: float = Field(0.01, ge=0, le=1)
    gate: GateRecord | None = None  # written by the gate: the measurement behind this configuration



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
    templates: str = ""  # an operator template set whose files override the built-in prompt templates
    # openai: an OpenAI-compatible server (OpenAI, vLLM, Ollama) chosen through the operator's llm profile
    profile: str = "local"
    # resolved from the profiles (operator settings, never tenant input)
    templates_dir: str = ""
    base_url: str = "http://127.0.0.1:11434/v1"
    model: str = ""
    api_key_env: str = ""  # empty (and no file) = no Authorization header (local servers)
    api_key_file: str = ""
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
    nli_model: str = ""  # claim_check nli: a model the operator offers (profiles `models`), entail/neutral/contradict


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
    # which of the KB's versions (shared/kb_versions.py) this config is: names its physical index and collection.
    # Set by the version commands only; 1 = the names a KB had before it had versions
    index_version: int = Field(1, ge=1, le=MAX_INDEX_VERSION)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        validate_kb_name(value)
        return value

    @classmethod
    def from_yaml(cls, text: str, *, name: str | None = None) -> KBConfig:
        return cls.from_mapping(yaml_mapping(text), name=name)

    @classmethod
    def from_mapping(cls, data, *, name: str | None = None) -> KBConfig:
        if not isinstance(data, dict):
            raise InvalidArgument("knowledge base config must be a YAML mapping")
        if name is not None:
            data = {**data, "name": name}
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

    @classmethod
    def from_tenant_yaml(cls, text: str, *, name: str, profiles: OperatorProfiles,
                         operator_tool: bool = False) -> KBConfig:
        """A KB config written by a tenant: operator settings are refused, models and profiles must be offered.

        `operator_tool`: the config comes from an operator's command on the server (`ragkb kb configure`),
        which may also set the records in OPERATOR_RECORDS."""
        return cls.from_tenant_mapping(yaml_mapping(text), name=name, profiles=profiles, operator_tool=operator_tool)

    @classmethod
    def from_tenant_mapping(cls, data, *, name: str, profiles: OperatorProfiles,
                            operator_tool: bool = False) -> KBConfig:
        """`from_tenant_yaml` for a config already parsed (the KB settings an inner call carries)."""
        config = cls.from_mapping(data, name=name)
        for section, keys in OPERATOR_FIELDS.items():
            given = sorted(set(data.get(section) or {}) & set(keys))
            if given:
                chooser = "templates" if given[0] == "templates_dir" else "profile"
                raise InvalidArgument(f"{section}.{given[0]} is an operator setting; choose one of the server's "
                                      f"named {section} settings with {section}.{chooser}")
        for section, keys in ({} if operator_tool else OPERATOR_RECORDS).items():
            given = sorted(set(data.get(section) or {}) & set(keys))
            if given:
                raise InvalidArgument(f"{section}.{given[0]} is set by the operator's tools (ragkb tune, "
                                      "ragkb kb configure), not in a knowledge-base config")
        for section, field in (("embedder", "model"), ("reranker", "model"), ("generator", "nli_model")):
            model = getattr(getattr(config, section), field)
            default = type(getattr(config, section)).model_fields[field].default
            allowed = {default, *profiles.models, *shipped_model_names()} - {""}
            if model != default and model not in allowed:
                raise InvalidArgument(f"{section}.{field} {model!r} is not offered by this server; "
                                      f"choose one of: {', '.join(sorted(allowed))}")
        config.resolve(profiles)  # unknown profile or template names are refused now, not at first use
        return config

    def resolve(self, profiles: OperatorProfiles) -> KBConfig:
        """The effective config: operator settings filled in from the profiles this config names."""
        llm = profiles.pick("llm", self.generator.profile)
        keyword = profiles.pick("keyword_store", self.keyword_store.profile)
        vector = profiles.pick("vector_store", self.vector_store.profile)
        return self.model_copy(update={
            "generator": self.generator.model_copy(update={
                **llm.model_dump(), "templates_dir": profiles.template_dir(self.generator.templates),
                "nli_model": profiles.model_path(self.generator.nli_model) if self.generator.nli_model else ""}),
            "keyword_store": self.keyword_store.model_copy(update=keyword.model_dump()),
            "vector_store": self.vector_store.model_copy(update=vector.model_dump()),
            "embedder": self.embedder.model_copy(update={"model": profiles.model_path(self.embedder.model)}),
            "reranker": self.reranker.model_copy(update={"model": profiles.model_path(self.reranker.model)}),
        })

    def tenant_view(self) -> KBConfig:
        """This config as its tenant wrote it: operator settings back at their defaults, never shown."""
        return self.model_copy(update={
            section: getattr(self, section).model_copy(
                update={key: type(getattr(self, section)).model_fields[key].default for key in keys})
            for section, keys in OPERATOR_FIELDS.items()})

    def to_tenant_yaml(self) -> str:
        data = self.model_dump(mode="json")
        for section, keys in OPERATOR_FIELDS.items():
            for key in keys:
                data[section].pop(key, None)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# Settings that come only from operator profiles (shared/profiles.py): a tenant's KB config naming one is refused.
OPERATOR_FIELDS = {
    "generator": ("base_url", "model", "api_key_env", "api_key_file", "templates_dir"),
    "keyword_store": ("hosts", "index_prefix"),
    "vector_store": ("uri",),
}


# Stored with a KB but written only by the operator's tools: a file path on the server, and measurements.
OPERATOR_RECORDS = {"retriever": ("golden_questions", "tuning", "gate")}


def yaml_mapping(text: str):
    """A KB config's YAML parsed (empty = {}); whether it is a mapping is checked by `KBConfig.from_mapping`."""
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise InvalidArgument(f"knowledge base config is not valid YAML: {error}") from None


def shipped_model_names() -> tuple[str, ...]:
    from shared.embedders import SHIPPED_MODELS

    return tuple(SHIPPED_MODELS)


def validate_kb_name(name: str) -> None:
    if not name or len(name) > 64 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
        raise InvalidArgument(
            f"invalid knowledge base name {name!r}: use 1-64 ASCII letters, digits, '-' or '_'"
        )


def storage_name(name: str) -> str:
    """A KB name as Milvus collections spell it (letters, digits and '_' only): '-' becomes '_', so 'a-b' and
    'a_b' would share one collection; the catalog refuses the second of two such names."""
    return name.replace("-", "_")
