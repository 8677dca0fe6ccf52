-- The re-index jobs of a building KB version (owner: indexer; shared/kb_versions.py): the registry's
-- documents split into numbered batches when the build is planned, each re-indexed by one job and marked
-- done; the version's docs_done is the sum of its done batches.
CREATE TABLE kb_version_batches (
    kb TEXT NOT NULL,
    version INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    documents TEXT NOT NULL,
    size INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kb, version, batch)
);
