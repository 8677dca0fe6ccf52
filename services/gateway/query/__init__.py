"""The query runtime: stages, steps, conversations."""
