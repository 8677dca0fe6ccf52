"""Vector store on Milvus: Milvus Lite (a local file, the embedded default) or a Milvus server.

One collection per knowledge base, named with the embedding model id and its
dimension, so two models can never share a collection; opening a collection
whose vector dimension differs from the embedder's is refused. Each row holds
the full chunk as JSON so the dense route can answer on its own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

import numpy as np
from google.protobuf import json_format

from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition, InvalidArgument
from shared.stores.base import require_namespaces

_clients: dict[str, object] = {}
_clients_lock = threading.Lock()

ID_MAX = 128
NAMESPACE_MAX = 256
DOC_ID_MAX = 1024


def milvus_client(uri: str):
    """One MilvusClient per URI per process (Milvus Lite allows one process per file)."""
    from pymilvus import MilvusClient

    with _clients_lock:
        if uri not in _clients:
            _clients[uri] = MilvusClient(uri=uri)
        return _clients[uri]


def close_clients() -> None:
    with _clients_lock:
        for client in _clients.values():
            client.close()
        _clients.clear()


def collection_name(kb: str, model_id: str, dimension: int) -> str:
    return f"kb_{kb}__{model_id}_{dimension}".replace("-", "_")


def _expr_list(values: Sequence) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def filter_expression(search_filter: chunk_pb2.SearchFilter) -> str:
    clauses = [f"namespace in {_expr_list(require_namespaces(search_filter))}"]
    if search_filter.doc_ids:
        clauses.append(f"doc_id in {_expr_list(list(search_filter.doc_ids))}")
    if search_filter.block_types:
        clauses.append(f"block_type in {_expr_list([int(b) for b in search_filter.block_types])}")
    return " and ".join(clauses)


class MilvusVectorStore:
    def __init__(self, uri: str, *, kb: str, model_id: str, dimension: int, index_type: str = "AUTOINDEX",
                 metric: str = "COSINE"):
        self._client = milvus_client(uri)
        self.uri = uri
        self.dimension = dimension
        self.metric = metric
        self.collection = collection_name(kb, model_id, dimension)
        self._lock = threading.Lock()
        self._ensure_collection(index_type)

    def _ensure_collection(self, index_type: str) -> None:
        from pymilvus import DataType

        client = self._client
        if client.has_collection(self.collection):
            existing = client.describe_collection(self.collection)
            for field in existing["fields"]:
                if field["name"] == "vector":
                    found = int(field["params"]["dim"])
                    if found != self.dimension:
                        raise FailedPrecondition(
                            f"collection {self.collection} holds {found}-d vectors but the configured embedder "
                            f"produces {self.dimension}-d; re-index into a new knowledge base instead of mixing models"
                        )
            client.load_collection(self.collection)
            return
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=ID_MAX)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dimension)
        schema.add_field("namespace", DataType.VARCHAR, max_length=NAMESPACE_MAX)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=DOC_ID_MAX)
        schema.add_field("block_type", DataType.INT64)
        schema.add_field("payload", DataType.JSON)
        index = client.prepare_index_params()
        index.add_index(field_name="vector", index_type=index_type, metric_type=self.metric)
        client.create_collection(self.collection, schema=schema, index_params=index)
        client.load_collection(self.collection)

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk], vectors: np.ndarray) -> None:
        if len(chunks) != len(vectors):
            raise InvalidArgument(f"{len(chunks)} chunks but {len(vectors)} vectors")
        if len(vectors) and vectors.shape[1] != self.dimension:
            raise FailedPrecondition(f"vectors are {vectors.shape[1]}-d, collection {self.collection} is {self.dimension}-d")
        rows = [
            {
                "id": c.chunk_id,
                "vector": v.tolist(),
                "namespace": c.namespace,
                "doc_id": c.doc_id,
                "block_type": int(c.block_type),
                "payload": json_format.MessageToDict(c, preserving_proto_field_name=True),
            }
            for c, v in zip(chunks, vectors)
        ]
        with self._lock:
            for start in range(0, len(rows), 256):
                self._client.upsert(self.collection, rows[start:start + 256])

    def delete_ids(self, chunk_ids: Sequence[str]) -> int:
        if not chunk_ids:
            return 0
        present = self._existing(chunk_ids)
        if present:
            with self._lock:
                self._client.delete(self.collection, ids=sorted(present))
        return len(present)

    def delete_document(self, namespace: str, doc_id: str) -> int:
        return self.delete_ids(sorted(self.chunk_ids(namespace, doc_id)))

    def search(self, vector: np.ndarray, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]:
        with self._lock:
            hits = self._client.search(
                self.collection, data=[np.asarray(vector, dtype=np.float32).tolist()], limit=limit,
                filter=filter_expression(search_filter), output_fields=["payload"],
                search_params={"metric_type": self.metric},
            )[0]
        candidates = []
        for rank, hit in enumerate(hits, start=1):
            chunk = json_format.ParseDict(hit["entity"]["payload"], chunk_pb2.KnowledgeChunk())
            score = float(hit["distance"])
            candidates.append(chunk_pb2.Candidate(chunk=chunk, score=score, route=chunk_pb2.ROUTE_DENSE,
                                                  dense_rank=rank, dense_score=score))
        return candidates

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]:
        expr = f"namespace == {json.dumps(namespace)} and doc_id == {json.dumps(doc_id)}"
        with self._lock:
            rows = self._client.query(self.collection, filter=expr, output_fields=["id"])
        return {r["id"] for r in rows}

    def count(self) -> int:
        with self._lock:
            rows = self._client.query(self.collection, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    def drop(self) -> None:
        with self._lock:
            self._client.drop_collection(self.collection)

    def _existing(self, chunk_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(chunk_ids), 500):
            batch = list(chunk_ids[start:start + 500])
            with self._lock:
                rows = self._client.get(self.collection, ids=batch, output_fields=["id"])
            found.update(r["id"] for r in rows)
        return found
