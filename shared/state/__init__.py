"""Control-plane state: KB catalog, document registry, jobs and uploads, traces, API keys.

Embedded mode keeps each under the data directory (SQLite files, YAML files,
upload files); cluster mode keeps all of them in one PostgreSQL database named
by `database_url` (docs/architecture.md has the ownership table). Each
repository speaks SQL through `shared.state.sql.SqlDatabase`, so the same
statements and the same contract tests run on both engines.
"""
