-- The KB settings a job runs with (a serialized ragkb.v1.KnowledgeBaseSettings), resolved by the gateway
-- when it accepted the job: workers never read the KB catalog (shared/kb_settings.py)
ALTER TABLE jobs ADD COLUMN kb_settings BYTEA NOT NULL DEFAULT '\x'::bytea;
