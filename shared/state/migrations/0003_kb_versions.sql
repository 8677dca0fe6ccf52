-- Knowledge-base versions (owner: indexer; shared/kb_versions.py): one row per numbered config with its
-- physical index, its state (building, ready, live, retired, dropped, failed), re-index progress and the
-- switch gate's decision. A KB without rows is version 1, live, on the names it had before.
CREATE TABLE kb_versions (
    kb TEXT NOT NULL,
    version INTEGER NOT NULL,
    config_yaml TEXT NOT NULL,
    state TEXT NOT NULL,
    docs_done INTEGER NOT NULL DEFAULT 0,
    docs_total INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    decision TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kb, version)
);
CREATE INDEX kb_versions_by_state ON kb_versions(kb, state);
