"""Keyword and vector stores behind Protocols; retrievers and indexers never import a backend."""
