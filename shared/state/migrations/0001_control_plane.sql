-- The control plane of a cluster: every table a service owns (docs/architecture.md).
-- Timestamps are ISO-8601 UTC text, as in the embedded SQLite files, so both engines
-- order and compare them the same way.

-- KB catalog (owner: indexer). `version` comes from one sequence, so it only grows,
-- also across a KB dropped and created again; readers compare it with what they cached.
CREATE SEQUENCE kb_config_version;
CREATE TABLE kb_catalog (
    name TEXT PRIMARY KEY,
    config_yaml TEXT NOT NULL,
    version BIGINT NOT NULL DEFAULT nextval('kb_config_version'),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Document registry (owner: indexer)
CREATE TABLE documents (
    kb TEXT NOT NULL,
    namespace TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    status TEXT NOT NULL,
    source_uri TEXT NOT NULL DEFAULT '',
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kb, namespace, doc_id)
);
CREATE TABLE chunk_payloads (
    kb TEXT NOT NULL,
    namespace TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (kb, namespace, doc_id, chunk_id)
);
CREATE TABLE kb_models (
    kb TEXT PRIMARY KEY,
    model_id TEXT NOT NULL,
    dimension INTEGER NOT NULL
);

-- Ingestion jobs (owner: gateway creates, workers move them) and their uploaded bytes
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,
    kb TEXT NOT NULL,
    namespace TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    filename TEXT NOT NULL,
    upload_path TEXT NOT NULL DEFAULT '',
    state INTEGER NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    chunks_total INTEGER NOT NULL DEFAULT 0,
    chunks_done INTEGER NOT NULL DEFAULT 0,
    outcome INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    started_at TEXT NOT NULL DEFAULT '',
    runner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX jobs_by_kb ON jobs(kb, created_at);
CREATE INDEX jobs_by_state ON jobs(state, updated_at);
CREATE TABLE job_uploads (
    job_id TEXT PRIMARY KEY REFERENCES jobs(job_id) ON DELETE CASCADE,
    content BYTEA NOT NULL
);

-- Query traces (owner: gateway), bounded by the gateway's trace_limit
CREATE TABLE traces (
    seq BIGSERIAL PRIMARY KEY,
    trace_id TEXT NOT NULL UNIQUE,
    namespaces TEXT NOT NULL,
    body TEXT NOT NULL
);

-- API keys (owner: the operator's `ragkb keys`; the gateway reads them). Hashes only.
CREATE TABLE api_keys (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    namespaces TEXT NOT NULL,
    groups TEXT NOT NULL,
    sha256 TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
