"""Generated protobuf contracts, imported from this one place.

Regenerate with `python scripts/gen_protos.py`; never edit the generated files.
"""

from shared.contracts.ragkb.v1 import (
    chunk_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    generator_pb2,
    generator_pb2_grpc,
    indexer_pb2,
    indexer_pb2_grpc,
    parser_pb2,
    parser_pb2_grpc,
    reranker_pb2,
    reranker_pb2_grpc,
    retriever_pb2,
    retriever_pb2_grpc,
)

__all__ = [
    "chunk_pb2",
    "gateway_pb2",
    "gateway_pb2_grpc",
    "generator_pb2",
    "generator_pb2_grpc",
    "indexer_pb2",
    "indexer_pb2_grpc",
    "parser_pb2",
    "parser_pb2_grpc",
    "reranker_pb2",
    "reranker_pb2_grpc",
    "retriever_pb2",
    "retriever_pb2_grpc",
]
