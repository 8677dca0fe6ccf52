"""ragkb: the user-facing package — CLI, REST client and the embedded (one-process) stack."""
