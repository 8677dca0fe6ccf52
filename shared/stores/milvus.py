"""Vector store on Milvus: Milvus Lite (a local file, the embedded default) or a Milvus server.

One collection per knowledge base, named with the embedding model id and its
dimension, so two models can never share a collection; opening a collection
whose vector dimension differs from the embedder's is refused. Each row holds
the full chunk as JSON so the dense route can answer on its own. With an embedder
that has lexical weights (bge-m3), each row also holds them in a sparse-vector field
searched by inner product: the sparse route. Each row also keeps the vectors of the
chunk's scored sentences (shared/sentence_vectors.py) in a field searches never return;
`chunk_vectors` reads them by id, under the same namespace and ACL filter as a search,
for the few chunks an answer is written from.

On Milvus Lite, dense searches are answered by an exact in-process copy of the collection's
vectors kept in step with every write (shared/stores/vector_mirror.py); Milvus Lite answers the
rest, and every search of a Milvus server.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
from google.protobuf import json_format

from shared.config import storage_name
from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition, InvalidArgument, Unavailable
from shared.sentence_vectors import carried, pack_sentences
from shared.sentences import SPLITTER_VERSION
from shared.stores.acl import acl_clause_groups, chunk_groups
from shared.stores.base import require_namespaces, sibling_fetch_args
from shared.stores.filters import metadata_pairs, milvus_metadata_clauses
from shared.stores.vector_mirror import METRICS, MirrorRow, VectorMirror, forget_mirrors, mirror_for

logger = logging.getLogger(__name__)

_clients: dict[str, object] = {}
_clients_lock = threading.Lock()

ID_MAX = 128
NAMESPACE_MAX = 256
DOC_ID_MAX = 1024
# creating or loading a collection on a busy server takes far longer than a search
ADMIN_TIMEOUT_S = 120.0
CONSISTENCY_LEVELS = ("Session", "Strong", "Bounded", "Eventually")
ACL_MAX = 8192
ACL_GROUPS_KEY = "_acl_groups"  # payload key beside the chunk's own fields: its ACL groups as a list
SENTENCES_MAX = 65535  # Milvus's longest VARCHAR: a chunk whose sentence vectors do not fit stores none
VISIBILITY_POLL_S = 0.05
# rows per upsert request, and per insert request of `bulk_insert` (384-d vectors: ~1.5 KB a row plus payload)
UPSERT_BATCH = 256
BULK_INSERT_BATCH = 2000
MIRROR_BUILD_BATCH = 256  # rows per page when a vector mirror is built from its collection (see _build_mirror)
# a search waits for the mirror's build of a collection of up to this many rows (about 1 s), so a small KB's
# answers never depend on whether the build was done; a larger one is built in the background
MIRROR_BUILD_WAIT_ROWS = 10_000


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
        forget_mirrors()


def collection_name(kb: str, model_id: str, dimension: int, version: int = 1) -> str:
    """Version 1 keeps the name a KB had before versions existed; later ones start `kbv<N>_`, which no
    KB name can produce after the `kb_` of version 1."""
    start = "kb_" if version == 1 else f"kbv{version}_"
    return f"{start}{storage_name(kb)}__{model_id}_{dimension}".replace("-", "_")


def alias_name(kb: str) -> str:
    """The collection alias that always names the live version's collection."""
    return f"kblive_{storage_name(kb)}"


def _literal(value) -> str:
    """A Milvus expression literal. Non-ASCII text stays as is: Milvus does not decode
    `\\uXXXX` escapes, so an escaped Chinese doc id would silently match nothing."""
    return json.dumps(value, ensure_ascii=False)


def _expr_list(values: Sequence) -> str:
    return "[" + ", ".join(_literal(v) for v in values) + "]"


def filter_expression(search_filter: chunk_pb2.SearchFilter, *, server: bool = False) -> str:
    """The Milvus filter of every search and query; `server`: a Milvus server, whose LIKE matches prefixes only."""
    clauses = [f"namespace in {_expr_list(require_namespaces(search_filter))}"]
    if search_filter.doc_ids:
        clauses.append(f"doc_id in {_expr_list(list(search_filter.doc_ids))}")
    if search_filter.block_types:
        clauses.append(f"block_type in {_expr_list([int(b) for b in search_filter.block_types])}")
    clauses.extend(milvus_metadata_clauses(metadata_pairs(search_filter)))
    groups = acl_clause_groups(search_filter)
    if groups is not None:
        clauses.append(_acl_clause(groups, server=server))
    return " and ".join(clauses)


def _acl_clause(groups: list[str], *, server: bool) -> str:
    """Public chunks (acl "") or chunks one of `groups` may read.

    A Milvus 2.3 server refuses `acl like "%|g|%"` (only prefix patterns), so there the groups kept in the
    payload under ACL_GROUPS_KEY are matched with json_contains_any. Milvus Lite matches the "|g1|g2|"
    string, which rows written before the payload kept the groups also have (LIKE wildcards escaped)."""
    if not groups:
        return 'acl == ""'
    if server:
        return f'(acl == "" or json_contains_any(payload["{ACL_GROUPS_KEY}"], {_expr_list(groups)}))'
    return "(acl == \"\"" + "".join(f" or acl like {_literal('%|' + _like_escape(g) + '|%')}" for g in groups) + ")"


def chunk_from_payload(payload: dict) -> chunk_pb2.KnowledgeChunk:
    """The chunk a payload (`MessageToDict(chunk, preserving_proto_field_name=True)`) was written from.

    `json_format.ParseDict` walks the descriptor in Python: 0.15 ms a chunk, most of a 100-deep
    dense search. The payloads this store writes map onto the message's constructor directly
    (int64 comes back as a string, an enum as its name); anything else takes `ParseDict`, with its
    errors."""
    payload = {k: v for k, v in payload.items() if k != ACL_GROUPS_KEY}
    try:
        fields = dict(payload)
        source = fields.pop("source", None)
        if isinstance(fields.get("block_type"), str):
            fields["block_type"] = chunk_pb2.BlockType.Value(fields["block_type"])
        if isinstance(fields.get("doc_version"), str):
            fields["doc_version"] = int(fields["doc_version"])
        chunk = chunk_pb2.KnowledgeChunk(**fields)
        if source is not None:
            chunk.source.CopyFrom(chunk_pb2.SourceInfo(**source))
        return chunk
    except (TypeError, ValueError, AttributeError):
        return json_format.ParseDict(payload, chunk_pb2.KnowledgeChunk())


def search_params_for(search_params: dict, limit: int) -> dict:
    """The search parameters for a search of `limit` hits: an HNSW `ef` below the limit is raised to it.

    `ef` is the operator's search width, chosen for the retriever's default depth; a KB asking for more
    candidates than that (candidate_depth 100, say) must not get fewer hits, or an error from the server."""
    params = search_params["params"]
    if params.get("ef", limit) >= limit:
        return search_params
    return {**search_params, "params": {**params, "ef": limit}}


def _payload(chunk: chunk_pb2.KnowledgeChunk) -> dict:
    """The chunk as JSON, plus its ACL groups as a list (what a server's ACL filter matches)."""
    payload = json_format.MessageToDict(chunk, preserving_proto_field_name=True)
    groups = chunk_groups(chunk)
    if groups:
        payload[ACL_GROUPS_KEY] = groups
    return payload


def _mirror_rows(chunks: Sequence[chunk_pb2.KnowledgeChunk], vectors: np.ndarray) -> list[MirrorRow]:
    return [MirrorRow(c.chunk_id, v, c.namespace, c.doc_id, int(c.block_type), tuple(chunk_groups(c)),
                      c.SerializeToString()) for c, v in zip(chunks, vectors)]


def _mirror_filter(search_filter: chunk_pb2.SearchFilter) -> dict:
    """A filter without metadata clauses as `VectorMirror.search` and `readable` take it."""
    return {"namespaces": require_namespaces(search_filter), "doc_ids": list(search_filter.doc_ids),
            "block_types": [int(b) for b in search_filter.block_types],
            "acl_groups": acl_clause_groups(search_filter)}


def _acl_value(chunk: chunk_pb2.KnowledgeChunk) -> str:
    groups = chunk_groups(chunk)
    return "|" + "|".join(groups) + "|" if groups else ""


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def encode_sentences(vectors: np.ndarray | None) -> str:
    """A chunk's sentence vectors as its `sentences` field: "<splitter version>:<count>:<base64 float16>";
    '' for none, or when they would not fit the field."""
    if vectors is None or not len(vectors):
        return ""
    value = f"{SPLITTER_VERSION}:{len(vectors)}:{base64.b64encode(pack_sentences(vectors)).decode('ascii')}"
    return value if len(value) <= SENTENCES_MAX else ""


def decode_sentences(value: str) -> tuple[int, int, bytes]:
    """(splitter version, count, packed float16) of a `sentences` field; (0, 0, b'') for none."""
    if not value:
        return 0, 0, b""
    splitter, count, data = value.split(":", 2)
    return int(splitter), int(count), base64.b64decode(data)


class MilvusVectorStore:
    def __init__(self, uri: str, *, kb: str, model_id: str, dimension: int, index_type: str = "AUTOINDEX",
                 metric: str = "COSINE", index_params: dict | None = None, search_params: dict | None = None,
                 timeout_s: float = 5.0, search_consistency: str = "Session", visibility_timeout_s: float = 30.0,
                 sparse_encoder: Callable[[list[str]], list[dict[int, float]]] | None = None, version: int = 1,
                 mirror_rows: int = 0):
        """`mirror_rows`: on Milvus Lite, dense searches of a collection of up to that many rows are answered
        by the process's in-memory `VectorMirror` of it (shared/stores/vector_mirror.py); 0 = never."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if visibility_timeout_s <= 0:
            raise ValueError(f"visibility_timeout_s must be positive, got {visibility_timeout_s}")
        if search_consistency not in CONSISTENCY_LEVELS:
            raise ValueError(f"search_consistency {search_consistency!r} must be one of {', '.join(CONSISTENCY_LEVELS)}")
        self._search_consistency = search_consistency
        self._visibility_timeout = visibility_timeout_s
        self._client = milvus_client(uri)
        self.uri = uri
        self._server = uri.startswith(("http://", "https://", "tcp://", "grpc://"))
        self.dimension = dimension
        self.metric = metric
        self._index_params = dict(index_params or {})
        self._search_params = {"metric_type": metric, "params": dict(search_params or {})}
        # every server call carries this deadline, so a dead or hung server fails the dense route fast
        self._timeout = timeout_s
        self.collection = collection_name(kb, model_id, dimension, version)
        self.alias = alias_name(kb)
        self._lock = threading.Lock()
        # a query's reads (searches, vectors and split parts by id) run side by side against a server, whose
        # client is a thread-safe gRPC channel; Milvus Lite keeps one call at a time
        self._reading = contextlib.nullcontext() if self._server else self._lock
        self._has_acl = True
        self.has_sentences = True  # False for a collection created before sentence vectors were stored
        self.model_id = model_id
        self._sparse_encoder = sparse_encoder
        self.has_sparse = sparse_encoder is not None
        self._ensure_collection(index_type)
        self._mirror: VectorMirror | None = None
        if not self._server and mirror_rows > 0 and metric in METRICS:
            self._mirror = mirror_for(uri, self.collection, metric=metric, dimension=dimension, max_rows=mirror_rows)

    def _ensure_collection(self, index_type: str) -> None:
        from pymilvus import DataType

        client = self._client
        if client.has_collection(self.collection, timeout=ADMIN_TIMEOUT_S):
            existing = client.describe_collection(self.collection, timeout=ADMIN_TIMEOUT_S)
            for field in existing["fields"]:
                if field["name"] == "vector":
                    found = int(field["params"]["dim"])
                    if found != self.dimension:
                        raise FailedPrecondition(
                            f"collection {self.collection} holds {found}-d vectors but the configured embedder "
                            f"produces {self.dimension}-d; re-index into a new knowledge base instead of mixing models"
                        )
            self._has_acl = any(field["name"] == "acl" for field in existing["fields"])
            self.has_sentences = any(field["name"] == "sentences" for field in existing["fields"])
            if self.has_sparse and not any(field["name"] == "sparse" for field in existing["fields"]):
                raise FailedPrecondition(f"collection {self.collection} has no sparse field for the embedder's "
                                         "lexical weights; re-index into a new knowledge base")
            client.load_collection(self.collection, timeout=ADMIN_TIMEOUT_S)
            return
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=ID_MAX)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dimension)
        # namespace is a plain field filtered inside every query, not a partition key: Milvus Lite 2.5.1
        # rejects any filter on a partition-key field, and a Milvus 2.3.5 server answers query() with a
        # partition-key filter with no rows (search works), which would break delete-by-document.
        schema.add_field("namespace", DataType.VARCHAR, max_length=NAMESPACE_MAX)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=DOC_ID_MAX)
        schema.add_field("block_type", DataType.INT64)
        schema.add_field("payload", DataType.JSON)
        schema.add_field("acl", DataType.VARCHAR, max_length=ACL_MAX)
        schema.add_field("sentences", DataType.VARCHAR, max_length=SENTENCES_MAX)
        if self.has_sparse:
            schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        index = client.prepare_index_params()
        index.add_index(field_name="vector", index_type=index_type, metric_type=self.metric,
                        params=self._index_params)
        if self.has_sparse:
            index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        # Strong by default: counts, chunk ids and deletes see every write, like the keyword stores;
        # searches use `search_consistency` instead (Strong costs a time tick per search)
        client.create_collection(self.collection, schema=schema, index_params=index, consistency_level="Strong",
                                 timeout=ADMIN_TIMEOUT_S)
        client.load_collection(self.collection, timeout=ADMIN_TIMEOUT_S)

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk], vectors: np.ndarray,
               sentence_vectors: Sequence[np.ndarray] | None = None) -> None:
        """Write chunks with their vectors and, when given, each chunk's scored-sentence vectors."""
        rows = self._rows(chunks, vectors, sentence_vectors)
        with self._mirrored() as mirror, self._lock:
            for start in range(0, len(rows), UPSERT_BATCH):
                self._client.upsert(self.collection, rows[start:start + UPSERT_BATCH], timeout=self._timeout)
            if mirror is not None:
                mirror.apply(_mirror_rows(chunks, vectors))

    def bulk_insert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk], vectors: np.ndarray,
                    sentence_vectors: Sequence[np.ndarray] | None = None) -> None:
        """Write many chunks fast (a first load, a re-index into a new version): the rows `upsert` writes.

        A Milvus upsert is a delete and an insert, and its delete records are binlogs that compaction must
        merge later; here the chunks not in the collection yet (looked up at Strong consistency, so a batch
        written again, e.g. a redelivered job, is not stored twice) are inserted in requests of
        BULK_INSERT_BATCH rows, and those already present go through `upsert`.
        """
        rows = self._rows(chunks, vectors, sentence_vectors)
        with self._mirrored() as mirror:
            present = self._existing([row["id"] for row in rows]) if rows else set()
            new = [row for row in rows if row["id"] not in present]
            with self._lock:
                for start in range(0, len(new), BULK_INSERT_BATCH):
                    self._client.insert(self.collection, new[start:start + BULK_INSERT_BATCH], timeout=self._timeout)
                again = [row for row in rows if row["id"] in present]
                for start in range(0, len(again), UPSERT_BATCH):
                    self._client.upsert(self.collection, again[start:start + UPSERT_BATCH], timeout=self._timeout)
            if mirror is not None:
                mirror.apply(_mirror_rows(chunks, vectors))

    def _rows(self, chunks: Sequence[chunk_pb2.KnowledgeChunk], vectors: np.ndarray,
              sentence_vectors: Sequence[np.ndarray] | None) -> list[dict]:
        if len(chunks) != len(vectors):
            raise InvalidArgument(f"{len(chunks)} chunks but {len(vectors)} vectors")
        if sentence_vectors is not None and len(sentence_vectors) != len(chunks):
            raise InvalidArgument(f"{len(chunks)} chunks but sentence vectors for {len(sentence_vectors)}")
        if len(vectors) and vectors.shape[1] != self.dimension:
            raise FailedPrecondition(f"vectors are {vectors.shape[1]}-d, collection {self.collection} is {self.dimension}-d")
        rows = [
            {
                "id": c.chunk_id,
                "vector": v.tolist(),
                "namespace": c.namespace,
                "doc_id": c.doc_id,
                "block_type": int(c.block_type),
                "payload": _payload(c),
                "acl": _acl_value(c),
            }
            for c, v in zip(chunks, vectors)
        ]
        if not self._has_acl:
            for row in rows:
                del row["acl"]
        if self.has_sentences:
            for row, found in zip(rows, sentence_vectors or [None] * len(rows)):
                row["sentences"] = encode_sentences(found)
        if self._sparse_encoder is not None:
            for row, weights in zip(rows, self._sparse_encoder([c.content for c in chunks])):
                # Milvus refuses an empty sparse vector; a text without weighted tokens matches nothing anyway
                row["sparse"] = weights or {0: 1e-9}
        return rows

    def delete_ids(self, chunk_ids: Sequence[str]) -> int:
        if not chunk_ids:
            return 0
        with self._mirrored() as mirror:
            present = self._existing(chunk_ids)
            if present:
                with self._lock:
                    self._client.delete(self.collection, ids=sorted(present), timeout=self._timeout)
                if mirror is not None:
                    mirror.remove(present)
        return len(present)

    @contextlib.contextmanager
    def _mirrored(self):
        """Hold the mirror's lock across a write (None without a mirror); a write that fails part-way
        leaves the mirror unbuilt, to be rebuilt from the collection by the next search."""
        if self._mirror is None:
            yield None
            return
        with self._mirror.lock:
            try:
                yield self._mirror
            except BaseException:
                self._mirror.invalidate()
                raise

    def delete_document(self, namespace: str, doc_id: str) -> int:
        return self.delete_ids(sorted(self.chunk_ids(namespace, doc_id)))

    def await_visible(self, written: Sequence[str] = (), deleted: Sequence[str] = ()) -> None:
        """Return once searches at `search_consistency` see every `written` id and none of `deleted`.

        Polls a query at the level searches use. Session is polled as Eventually: a searching process
        (the retriever) has its own session, which holds none of this process's writes. Strong needs no
        wait, and neither does Milvus Lite. Raises `Unavailable` naming the lag after `visibility_timeout_s`.
        """
        if not self._server or self._search_consistency == "Strong" or not (written or deleted):
            return
        level = "Eventually" if self._search_consistency == "Session" else self._search_consistency
        missing, lingering = set(written), set(deleted)
        deadline = time.monotonic() + self._visibility_timeout
        while True:
            missing -= self._existing(missing, level)
            lingering &= self._existing(lingering, level)
            if not missing and not lingering:
                return
            if time.monotonic() >= deadline:
                raise Unavailable(
                    f"Milvus collection {self.collection}: after {self._visibility_timeout:g} s, searches at "
                    f"{level} consistency still miss {len(missing)} written and still return {len(lingering)} "
                    f"deleted chunks (e.g. {sorted(missing | lingering)[0]!r}); the server's query nodes lag "
                    "behind its writes")
            time.sleep(VISIBILITY_POLL_S)

    def search(self, vector: np.ndarray, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]:
        found = self._search_mirror(vector, search_filter, limit)
        if found is not None:
            candidates = []
            for rank, (chunk, score) in enumerate(found, start=1):
                candidate = chunk_pb2.Candidate(score=score, route=chunk_pb2.ROUTE_DENSE, dense_rank=rank,
                                                dense_score=score)
                candidate.chunk.ParseFromString(chunk)  # in place: no chunk message to copy in
                candidates.append(candidate)
            return candidates
        hits = self._search("vector", np.asarray(vector, dtype=np.float32).tolist(),
                            search_params_for(self._search_params, limit), search_filter, limit)
        return [chunk_pb2.Candidate(chunk=chunk, score=score, route=chunk_pb2.ROUTE_DENSE, dense_rank=rank,
                                    dense_score=score) for rank, (chunk, score) in enumerate(hits, start=1)]

    def _search_mirror(self, vector: np.ndarray, search_filter: chunk_pb2.SearchFilter,
                       limit: int) -> list[tuple[bytes, float]] | None:
        """The mirror's hits; None when Milvus must answer (no mirror, too many rows, a metadata filter, or a
        large collection's mirror not built yet: this search starts its build)."""
        mirror = self._mirror
        if mirror is None or mirror.oversized or search_filter.metadata:
            return None
        self._check_acl(search_filter)
        mirror_filter = _mirror_filter(search_filter)  # a filter without namespaces fails before any build
        if not mirror.ready:  # read without its lock, which a build holds throughout
            if self.count() > MIRROR_BUILD_WAIT_ROWS:
                self._start_mirror_build(mirror)
                return None
            if not self.await_mirror():
                return None
        return mirror.search(vector, **mirror_filter, limit=limit)

    def await_mirror(self, timeout_s: float = 300.0) -> bool:
        """Build the mirror now if it is not built, or wait for the build under way; False without one (none,
        over its row limit), when the build failed or `timeout_s` ran out."""
        mirror = self._mirror
        if mirror is None:
            return False
        deadline = time.monotonic() + timeout_s
        while not mirror.ready and not mirror.oversized:
            if mirror.claim_build():
                self._build_mirror(mirror)
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not mirror.lock.acquire(timeout=remaining):
                break
            mirror.lock.release()  # a build under way held it until done
        return mirror.ready

    def _start_mirror_build(self, mirror: VectorMirror) -> None:
        if mirror.claim_build():
            threading.Thread(target=self._build_mirror, args=(mirror,), name=f"mirror-{self.collection}",
                             daemon=True).start()

    def _build_mirror(self, mirror: VectorMirror) -> None:
        """Fill the mirror with every row of the collection (the caller claimed the build). It holds the mirror's
        lock throughout, so no write of this process lands half-way; searches go to Milvus meanwhile. Small
        pages: Milvus Lite 2.5.1 returns vectors ~40 x slower a row in pages of 2,000 than of 256."""
        fields = ["id", "vector", "namespace", "doc_id", "block_type", "payload", *(["acl"] if self._has_acl else [])]
        started = time.perf_counter()
        try:
            with mirror.lock:
                mirror.start_build()
                # and Milvus Lite 2.5.1 fails a query for vectors of an empty collection dropped once before
                if self.count():
                    self._fill_mirror(mirror, fields)
                mirror.finish_build()
        except Exception:
            logger.warning("vector mirror of %s not built; Milvus Lite answers its searches", self.collection,
                           exc_info=True)
            mirror.invalidate()
        finally:
            mirror.end_build()
        if mirror.ready:
            logger.info("vector mirror of %s: %d rows, %.1f MiB, built in %.1f s", self.collection, len(mirror),
                        mirror.nbytes() / 2**20, time.perf_counter() - started)

    def _fill_mirror(self, mirror: VectorMirror, fields: list[str]) -> None:
        with self._lock:
            iterator = self._client.query_iterator(self.collection, batch_size=MIRROR_BUILD_BATCH,
                                                   output_fields=fields, timeout=self._timeout)
        try:
            while mirror.filling:
                with self._lock:  # a page at a time: searches answered by Milvus meanwhile go in between
                    batch = iterator.next()
                if not batch:
                    break
                mirror.apply([MirrorRow(row["id"], np.asarray(row["vector"], np.float32), row["namespace"],
                                        row["doc_id"], int(row["block_type"]),
                                        tuple(g for g in row.get("acl", "").split("|") if g),
                                        chunk_from_payload(row["payload"]).SerializeToString()) for row in batch])
        finally:
            iterator.close()

    def mirror_bytes(self) -> int:
        """Bytes the collection's in-process vector mirror holds (0 without one, or before its first search)."""
        return self._mirror.nbytes() if self._mirror is not None else 0

    def search_sparse(self, weights: dict[int, float], search_filter: chunk_pb2.SearchFilter,
                      limit: int) -> list[chunk_pb2.Candidate]:
        """The sparse route: inner product of the query's lexical weights with each chunk's."""
        if not self.has_sparse:
            raise FailedPrecondition(f"collection {self.collection} holds no lexical weights")
        if not weights:
            return []
        hits = self._search("sparse", weights, {"metric_type": "IP", "params": {}}, search_filter, limit)
        return [chunk_pb2.Candidate(chunk=chunk, score=score, route=chunk_pb2.ROUTE_SPARSE, sparse_rank=rank,
                                    sparse_score=score) for rank, (chunk, score) in enumerate(hits, start=1)]

    def _check_acl(self, search_filter: chunk_pb2.SearchFilter) -> None:
        if search_filter.acl_enforced and not self._has_acl:
            raise FailedPrecondition(
                f"collection {self.collection} was created before document ACLs and cannot filter by them; "
                "re-ingest its documents into a new knowledge base to search it with ACLs"
            )

    def _search(self, field: str, query, search_params: dict, search_filter: chunk_pb2.SearchFilter,
                limit: int) -> list[tuple[chunk_pb2.KnowledgeChunk, float]]:
        self._check_acl(search_filter)
        with self._reading:
            hits = self._client.search(
                self.collection, data=[query], anns_field=field, limit=limit,
                filter=filter_expression(search_filter, server=self._server), output_fields=["payload"],
                search_params=search_params, timeout=self._timeout,
                consistency_level=self._search_consistency,
            )[0]
        return [(chunk_from_payload(hit["entity"]["payload"]), float(hit["distance"]))
                for hit in hits]

    @property
    def keeps_read_vectors(self) -> bool:
        """Whether `chunk_vectors` answers repeated reads from memory itself (a Milvus Lite vector mirror)."""
        return self._mirror is not None

    def chunk_vectors(self, chunk_ids: Sequence[str],
                      search_filter: chunk_pb2.SearchFilter) -> dict[str, chunk_pb2.ChunkVectors]:
        """The stored vectors of the given chunks that `search_filter` lets its caller read (namespaces, ACL,
        metadata: the same clauses as a search), by chunk id; ids the filter excludes are simply absent.

        With a built vector mirror and a filter it can apply, the mirror decides what may be read and hands
        over the vectors it kept; only the others are read from Milvus Lite (and then kept)."""
        if not chunk_ids:
            return {}
        self._check_acl(search_filter)
        mirror = self._mirror
        readable = None
        if mirror is not None and mirror.ready and not search_filter.metadata:
            readable = mirror.readable(chunk_ids, **_mirror_filter(search_filter))
        if readable is None:
            return self._read_vectors(chunk_ids, search_filter)
        found = mirror.kept(readable)
        missing = [chunk_id for chunk_id in readable if chunk_id not in found]
        if missing:
            for chunk_id, vectors in self._read_vectors(missing, search_filter).items():
                mirror.keep(chunk_id, readable[chunk_id], vectors, vectors.ByteSize())
                found[chunk_id] = vectors
        return found

    def _read_vectors(self, chunk_ids: Sequence[str],
                      search_filter: chunk_pb2.SearchFilter) -> dict[str, chunk_pb2.ChunkVectors]:
        fields = ["id", "vector", *(["sentences"] if self.has_sentences else [])]
        expr = f"id in {_expr_list(list(dict.fromkeys(chunk_ids)))} and {filter_expression(search_filter, server=self._server)}"
        with self._reading:
            rows = self._client.query(self.collection, filter=expr, output_fields=fields, timeout=self._timeout,
                                      consistency_level=self._search_consistency)
        key = f"{self.model_id}/{self.dimension}"
        found = {}
        for row in rows:
            splitter, count, data = decode_sentences(row.get("sentences", ""))
            found[row["id"]] = carried(key, row["vector"], data, count, splitter)
        return found

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]:
        expr = f"namespace == {_literal(namespace)} and doc_id == {_literal(doc_id)}"
        with self._lock:
            rows = self._client.query(self.collection, filter=expr, output_fields=["id"], timeout=self._timeout)
        return {r["id"] for r in rows}

    def chunk_ids_of(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {doc_id: set() for doc_id in doc_ids}
        if not doc_ids:
            return found
        expr = f"namespace == {_literal(namespace)} and doc_id in {_expr_list(doc_ids)}"
        with self._lock:
            rows = self._client.query(self.collection, filter=expr, output_fields=["id", "doc_id"],
                                      timeout=self._timeout)
        for row in rows:
            found[row["doc_id"]].add(row["id"])
        return found

    def chunks_by_group(self, namespaces: Sequence[str], group_ids: Sequence[str]) -> list[chunk_pb2.KnowledgeChunk]:
        """Every stored part of the given split groups, ordered by group then part_index."""
        namespaces, group_ids = sibling_fetch_args(namespaces, group_ids)
        if not group_ids:
            return []
        expr = f'namespace in {_expr_list(namespaces)} and payload["group_id"] in {_expr_list(group_ids)}'
        with self._reading:
            rows = self._client.query(self.collection, filter=expr, output_fields=["payload"], timeout=self._timeout)
        chunks = [chunk_from_payload(r["payload"]) for r in rows]
        order = {g: i for i, g in enumerate(group_ids)}
        return sorted(chunks, key=lambda c: (order[c.group_id], c.part_index, c.position))

    def count(self) -> int:
        with self._lock:
            rows = self._client.query(self.collection, filter="", output_fields=["count(*)"],
                                      timeout=self._timeout)
        return int(rows[0]["count(*)"])

    def drop(self) -> None:
        with self._mirrored() as mirror, self._lock:
            self._client.drop_collection(self.collection, timeout=ADMIN_TIMEOUT_S)
            if mirror is not None:
                mirror.invalidate()

    def make_live(self) -> None:
        """Point the KB's collection alias at this collection: one `alter_alias` (`create_alias` the first time).

        Milvus Lite has no aliases (UNIMPLEMENTED); there the catalog's live version is the only pointer."""
        if not self._server:
            return
        with self._lock:
            if self.alias in self._client.list_aliases(timeout=ADMIN_TIMEOUT_S)["aliases"]:
                self._client.alter_alias(self.collection, self.alias, timeout=ADMIN_TIMEOUT_S)
            else:
                self._client.create_alias(self.collection, self.alias, timeout=ADMIN_TIMEOUT_S)

    def live_collection(self) -> str:
        """The collection the KB's alias names now ('' when there is none, always on Milvus Lite)."""
        if not self._server:
            return ""
        with self._lock:
            if self.alias not in self._client.list_aliases(timeout=ADMIN_TIMEOUT_S)["aliases"]:
                return ""
            return self._client.describe_alias(self.alias, timeout=ADMIN_TIMEOUT_S)["collection_name"]

    def _existing(self, chunk_ids: Sequence[str] | set[str], level: str = "Strong") -> set[str]:
        """The ids among `chunk_ids` that a query at consistency `level` returns."""
        found: set[str] = set()
        ordered = sorted(chunk_ids)
        for start in range(0, len(ordered), 500):
            with self._lock:
                rows = self._client.query(self.collection, filter=f"id in {_expr_list(ordered[start:start + 500])}",
                                          output_fields=["id"], timeout=self._timeout, consistency_level=level)
            found.update(r["id"] for r in rows)
        return found
