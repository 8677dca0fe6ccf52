"""Keyword store on Elasticsearch 8 (BM25), the production counterpart of the SQLite FTS5 store.

Layout: one index per knowledge base; namespace is a `keyword` field applied as
a filter clause of every query. Index-per-namespace was rejected: tenants are
many and small, every index costs shards and heap on the cluster, and a query
over several namespaces would fan out over indices. The price is that BM25's
document statistics are shared by the namespaces of one KB, which shifts scores
slightly but never leaks a chunk (the filter is inside the query).

Tokenization: `terms` holds the output of `shared.text.analyze` (jieba words or
characters for CJK, lower-cased Latin words), Latin words stemmed by snowball's
Porter, indexed with the `whitespace` analyzer, at index and query time alike.
That is nearly what the embedded engine's FTS5 `porter unicode61` tokenizer makes
of the same words, not exactly: the two stemmers differ on 125 of the 29,200 alphabetic
words of SciFact's abstracts (short words such as `is`, some `-y` endings), and FTS5 cuts words
with inner punctuation (`0.05`, `e.g`, `alzheimer's`) that stay whole here, so BM25
scores differ slightly between the engines. (Stemming happens here rather than in an
ES analyzer because the stemmer filters live in ES's analysis-common module, which a
minimal node need not have.) The full chunk is kept (protobuf, base64) so the BM25 route can
answer alone when the vector store is down. Since schema version 2 it is kept in binary doc values
and left out of `_source`: a search reads each hit's payload from its column instead of decompressing
the stored-fields block that hit's `_source` sits in, which took ~40% of a 100-hit search's CPU on
the node (`scripts/bench/es_payloads.py`). Indices of version 1 are still read from `_source`.

Failure behaviour: short request timeouts and bounded retries on connection
errors and 429/502/503/504, so a dead node makes the route fail fast (the
retriever then reports it degraded) instead of hanging a query.
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
import secrets
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition, Unavailable
from shared.stores.acl import acl_clause_groups, chunk_groups
from shared.stores.base import require_namespaces, sibling_fetch_args
from shared.stores.filters import metadata_pairs, metadata_terms
from shared.text import Analyzer, analyze, query_terms

SCHEMA_VERSION = 2  # 1: the payload in `_source`; 2: in doc values only
BULK_BATCH = 500
# chunks per bulk request inside `bulk_loading` (a few MB of analyzed terms and payloads per request)
BULK_LOAD_BATCH = 2000
# index settings while `bulk_loading`: no periodic refresh, and the translog fsynced every few seconds
# instead of per request (a crash loses the last seconds of the load, which the load's caller writes again)
BULK_LOAD_SETTINGS = {"index.refresh_interval": "-1", "index.translog.durability": "async"}
PAGE = 1000
REFRESH_POLICIES = ("wait_for", "true", "false")
_PREFIX = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")

MAPPINGS = {
    "dynamic": "strict",
    "_source": {"excludes": ["payload"]},
    "properties": {
        "chunk_id": {"type": "keyword"},
        "namespace": {"type": "keyword"},
        "doc_id": {"type": "keyword"},
        "group_id": {"type": "keyword"},
        "block_type": {"type": "integer"},
        "part_index": {"type": "integer"},
        "acl": {"type": "keyword"},
        "meta": {"type": "keyword"},
        "terms": {"type": "text", "analyzer": "whitespace"},
        "payload": {"type": "binary", "doc_values": True},
    },
}
# how a search asks for the payloads, by schema version: from doc values, no stored field (not even `_id`) read
PAYLOAD_FROM = {1: {"source": ["payload"]},
                2: {"source": False, "stored_fields": "_none_", "docvalue_fields": ["payload"]}}


_stemmers = threading.local()  # a snowball stemmer keeps state between calls: one per thread
STEM_CACHE = 200_000  # distinct words remembered (a few tens of MB at most)
_stems: dict[str, str] = {}  # word -> what `porter` makes of it; a plain dict: one C lookup a known word


def _stem(word: str) -> str:
    """The snowball stemmer is pure Python (~20 us a word); text repeats its words, so each is stemmed once."""
    stemmer = getattr(_stemmers, "porter", None)
    if stemmer is None:
        import snowballstemmer

        stemmer = _stemmers.porter = snowballstemmer.stemmer("porter")
    return stemmer.stemWord(word)


def _first_stem(token: str) -> str:
    stem = _stem(token) if token.isascii() and token.isalpha() else token
    if len(_stems) >= STEM_CACHE:  # bounded: start again rather than track recency on every look-up
        _stems.clear()
    _stems[token] = stem
    return stem


def porter(tokens: Iterable[str]) -> list[str]:
    """Porter-stem plain Latin words (snowball's Porter: nearly, not exactly, FTS5's); CJK words and numbers
    stay as they are."""
    known = _stems.get
    return [known(t) or _first_stem(t) for t in tokens]


def index_name(prefix: str, kb: str, version: int = 1) -> str:
    """Index names must be lower-case; a KB name with capitals gets a hash suffix so 'A' and 'a' differ.

    Version 1 keeps the name a KB had before versions existed; later versions add `.v<N>` ('.' is not
    allowed in KB names, so no KB's name can produce another KB's version)."""
    name = f"{prefix}-kb-{kb.lower()}"
    if kb != kb.lower():
        name += "-" + hashlib.sha1(kb.encode()).hexdigest()[:8]
    return name if version == 1 else f"{name}.v{version}"


def alias_name(prefix: str, kb: str) -> str:
    """The alias that always names the live version's index."""
    return f"{index_name(prefix, kb)}.live"


class ElasticsearchKeywordStore:
    """BM25 over pre-analyzed chunk text in one Elasticsearch index per knowledge base."""

    def __init__(self, hosts: Sequence[str], *, kb: str, index_prefix: str = "ragkb", analyzer: Analyzer = "jieba",
                 request_timeout_s: float = 5.0, max_retries: int = 2, refresh: str = "wait_for",
                 shards: int = 1, replicas: int = 0, version: int = 1):
        hosts = [h for h in hosts if h]
        if not hosts or not all(h.startswith(("http://", "https://")) for h in hosts):
            raise ValueError(f"elasticsearch hosts must be http(s):// URLs, got {list(hosts)!r}")
        if not _PREFIX.match(index_prefix):
            raise ValueError(f"index_prefix {index_prefix!r} must be 1-40 lower-case letters, digits, '-' or '_'")
        if refresh not in REFRESH_POLICIES:
            raise ValueError(f"refresh {refresh!r} must be one of {', '.join(REFRESH_POLICIES)}")
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be positive, got {request_timeout_s}")
        from elasticsearch import Elasticsearch

        self.hosts = hosts
        self.index = index_name(index_prefix, kb, version)
        self.alias = alias_name(index_prefix, kb)
        self._analyzer = analyzer
        self._refresh = refresh
        self._client = Elasticsearch(hosts, request_timeout=request_timeout_s, max_retries=max_retries,
                                     retry_on_timeout=True, retry_on_status=(429, 502, 503, 504))
        self._lock = threading.Lock()
        self._bulk_loads = 0  # `bulk_loading` blocks open on this store
        self._guard(self._ensure_index, shards, replicas)

    def _ensure_index(self, shards: int, replicas: int) -> None:
        indices = self._client.indices
        if indices.exists(index=self.index):
            meta = indices.get_mapping(index=self.index)[self.index]["mappings"].get("_meta", {})
            if meta.get("analyzer") != self._analyzer:
                raise FailedPrecondition(
                    f"index {self.index} was built with the {meta.get('analyzer')!r} analyzer but the knowledge base "
                    f"is configured with {self._analyzer!r}; re-index into a new knowledge base to change analyzers"
                )
            version = meta.get("schema_version", 1)
            if version not in PAYLOAD_FROM:
                raise FailedPrecondition(f"index {self.index} has schema version {version}, newer than this "
                                         f"release reads (up to {SCHEMA_VERSION})")
            self._payload_from = PAYLOAD_FROM[version]
            return
        self._payload_from = PAYLOAD_FROM[SCHEMA_VERSION]
        from elasticsearch import BadRequestError

        mappings = {**MAPPINGS, "_meta": {"analyzer": self._analyzer, "stemmer": "porter",
                                          "schema_version": SCHEMA_VERSION}}
        try:
            indices.create(index=self.index, mappings=mappings,
                           settings={"number_of_shards": shards, "number_of_replicas": replicas})
        except BadRequestError as error:
            if error.error != "resource_already_exists_exception":  # another process created it first
                raise

    def upsert(self, chunks: Sequence[chunk_pb2.KnowledgeChunk]) -> None:
        loading = self._bulk_loads > 0
        size = BULK_LOAD_BATCH if loading else BULK_BATCH
        for start in range(0, len(chunks), size):
            batch = chunks[start:start + size]
            operations: list[dict] = []
            for chunk in batch:
                operations.append({"index": {"_index": self.index, "_id": chunk.chunk_id}})
                operations.append(self._document(chunk))
            response = self._guard(self._client.bulk, operations=operations,
                                   refresh="false" if loading else self._refresh)
            failures = [(item["index"]["_id"], item["index"].get("error"))
                        for item in response["items"] if item["index"].get("error")]
            if failures:
                shown = "; ".join(f"{cid}: {_reason(err)}" for cid, err in failures[:3])
                raise FailedPrecondition(f"elasticsearch rejected {len(failures)} of {len(batch)} chunks in "
                                         f"{self.index}: {shown}")

    @contextmanager
    def bulk_loading(self) -> Iterator[None]:
        """Write many chunks fast (a first load, a re-index): no index refresh until the block ends.

        Inside the block `upsert` sends bulk requests of BULK_LOAD_BATCH chunks without refresh and the
        index runs with BULK_LOAD_SETTINGS, so Elasticsearch builds no small segments to merge later; the
        documents are the same `upsert` writes. On exit the previous settings are restored and the index
        refreshed: every chunk written inside is searchable when the block returns. Searches inside the
        block see the index as of its start.
        """
        with self._lock:
            if self._bulk_loads == 0:
                settings = self._guard(self._client.indices.get_settings, index=self.index, flat_settings=True)
                current = settings[self.index]["settings"]
                self._before_load = {key: current.get(key) for key in BULK_LOAD_SETTINGS}
                self._guard(self._client.indices.put_settings, index=self.index, settings=BULK_LOAD_SETTINGS)
            self._bulk_loads += 1
        try:
            yield
        finally:
            with self._lock:
                self._bulk_loads -= 1
                if self._bulk_loads == 0:
                    # None puts a setting the index did not have back on Elasticsearch's default
                    self._guard(self._client.indices.put_settings, index=self.index, settings=self._before_load)
                    self._guard(self._client.indices.refresh, index=self.index)

    def _document(self, chunk: chunk_pb2.KnowledgeChunk) -> dict:
        return {
            "chunk_id": chunk.chunk_id,
            "namespace": chunk.namespace,
            "doc_id": chunk.doc_id,
            "group_id": chunk.group_id,
            "block_type": int(chunk.block_type),
            "part_index": chunk.part_index,
            "acl": chunk_groups(chunk),
            "meta": metadata_terms(chunk.metadata),
            "terms": " ".join(porter(analyze(chunk.content or chunk.raw_content, self._analyzer))),
            "payload": base64.b64encode(chunk.SerializeToString()).decode("ascii"),
        }

    def delete_ids(self, chunk_ids: Sequence[str]) -> int:
        deleted = 0
        ids = list(dict.fromkeys(chunk_ids))
        for start in range(0, len(ids), BULK_BATCH):
            operations = [{"delete": {"_index": self.index, "_id": cid}} for cid in ids[start:start + BULK_BATCH]]
            response = self._guard(self._client.bulk, operations=operations, refresh=self._refresh)
            for item in response["items"]:
                result = item["delete"]
                if result.get("result") == "deleted":
                    deleted += 1
                elif result.get("status") != 404:
                    raise FailedPrecondition(f"elasticsearch could not delete {result['_id']} from {self.index}: "
                                             f"{_reason(result.get('error'))}")
        return deleted

    def delete_document(self, namespace: str, doc_id: str) -> int:
        return self.delete_ids(sorted(self.chunk_ids(namespace, doc_id)))

    def search(self, query: str, search_filter: chunk_pb2.SearchFilter, limit: int) -> list[chunk_pb2.Candidate]:
        filters = query_filters(search_filter)
        terms = list(dict.fromkeys(porter(query_terms(query, self._analyzer))))
        if not terms:
            return []
        body = {"bool": {"must": [{"match": {"terms": {"query": " ".join(terms)}}}], "filter": filters}}
        response = self._guard(self._client.search, index=self.index, query=body, size=limit,
                               track_total_hits=False, **self._payload_from)
        candidates = []
        for rank, hit in enumerate(response["hits"]["hits"], start=1):
            chunk = _chunk(hit)
            score = float(hit["_score"])
            candidates.append(chunk_pb2.Candidate(chunk=chunk, score=score, route=chunk_pb2.ROUTE_BM25,
                                                  bm25_rank=rank, bm25_score=score))
        return candidates

    def chunk_ids(self, namespace: str, doc_id: str) -> set[str]:
        query = {"bool": {"filter": [{"term": {"namespace": namespace}}, {"term": {"doc_id": doc_id}}]}}
        return {hit["_id"] for hit in self._scan(query, source=False)}

    def chunk_ids_of(self, namespace: str, doc_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {doc_id: set() for doc_id in doc_ids}
        if not doc_ids:
            return found
        query = {"bool": {"filter": [{"term": {"namespace": namespace}}, {"terms": {"doc_id": list(doc_ids)}}]}}
        for hit in self._scan(query, source=["doc_id"]):
            found[hit["_source"]["doc_id"]].add(hit["_id"])
        return found

    def chunks_by_group(self, namespaces: Sequence[str], group_ids: Sequence[str]) -> list[chunk_pb2.KnowledgeChunk]:
        """Every stored part of the given split groups, ordered by group then part_index."""
        namespaces, group_ids = sibling_fetch_args(namespaces, group_ids)
        if not group_ids:
            return []
        query = {"bool": {"filter": [{"terms": {"namespace": namespaces}}, {"terms": {"group_id": group_ids}}]}}
        chunks = [_chunk(hit) for hit in self._scan(query, **self._payload_from)]
        order = {g: i for i, g in enumerate(group_ids)}
        return sorted(chunks, key=lambda c: (order[c.group_id], c.part_index, c.position))

    def _scan(self, query: dict, **fields) -> list[dict]:
        """All hits of a filter-only query, paged by chunk_id (search_after), independent of result size;
        `fields`: what each hit returns (`source`, ...)."""
        hits: list[dict] = []
        after = None
        while True:
            extra = {"search_after": after} if after else {}
            response = self._guard(self._client.search, index=self.index, query=query, size=PAGE,
                                   sort=[{"chunk_id": "asc"}], track_total_hits=False, **fields, **extra)
            page = response["hits"]["hits"]
            hits.extend(page)
            if len(page) < PAGE:
                return hits
            after = page[-1]["sort"]

    def count(self) -> int:
        self._guard(self._client.indices.refresh, index=self.index)
        return int(self._guard(self._client.count, index=self.index)["count"])

    def drop(self) -> None:
        self._guard(self._client.indices.delete, index=self.index, ignore_unavailable=True)

    def make_live(self) -> None:
        """Point the KB's alias at this index, off any other, in one atomic alias update."""
        actions = [{"remove": {"index": "*", "alias": self.alias, "must_exist": False}},
                   {"add": {"index": self.index, "alias": self.alias}}]
        self._guard(self._client.indices.update_aliases, actions=actions)

    def live_index(self) -> str:
        """The index the KB's alias names now ('' when it names none)."""
        found = self._guard(self._client.indices.get_alias, name=self.alias, ignore_unavailable=True)
        return next(iter(found), "")

    def close(self) -> None:
        self._client.close()

    def _guard(self, call, *args, **kwargs):
        """Run one client call; connection failures become Unavailable naming the node."""
        from elasticsearch import ConnectionError as EsConnectionError
        from elasticsearch import ConnectionTimeout

        try:
            return call(*args, **kwargs)
        except (EsConnectionError, ConnectionTimeout) as error:
            raise Unavailable(f"elasticsearch at {', '.join(self.hosts)} is unreachable: {error}") from None


WARM_UP_SEARCHES = 1000
WARM_UP_PREFIX = "ragkb-warm-up"  # never a KB's index: those are named `<index_prefix>-kb-<kb>`
# Latin words only: the node's code path is the same for any term, and CJK text would load jieba's dictionary here
_WARM_UP_WORDS = "battery charge robot firmware payload pairing code reset telemetry sensor route dock motor".split()


def warm_up(hosts: Sequence[str], *, searches: int = WARM_UP_SEARCHES) -> None:
    """Run this store's requests on a new node until its JVM has compiled them, then drop what it wrote.

    A fresh JVM interprets Elasticsearch's REST, query and doc-value code at first and compiles the hot
    methods as calls add up: on the local stack's node a query's searches cost 13-24 ms of node CPU over the
    first hundred queries and 4-6 ms after a few hundred (`scripts/bench/cluster_vs_embedded.py` prints the
    CPU per query). Running the search and the sibling read here, on a scratch index of made-up chunks (~4 s
    for the default count), moves that cost before the stack reports ready. A long-running cluster needs
    none of this.
    """
    kb = secrets.token_hex(4)
    store = ElasticsearchKeywordStore(hosts, kb=kb, index_prefix=WARM_UP_PREFIX, refresh="true")
    try:
        words = random.Random(0)
        store.upsert([chunk_pb2.KnowledgeChunk(
            chunk_id=f"warm-up-{n}", kb=kb, namespace="default", doc_id=f"doc-{n // 4}", group_id=f"group-{n // 2}",
            part_index=n % 2, content=" ".join(words.choices(_WARM_UP_WORDS, k=40))) for n in range(64)])
        search_filter = chunk_pb2.SearchFilter(namespaces=["default"])
        for n in range(searches):
            store.search(" ".join(words.sample(_WARM_UP_WORDS, 4)), search_filter, 30)
            if n % 3 == 0:
                store.chunks_by_group(["default"], [f"group-{words.randrange(32)}", f"group-{words.randrange(32)}"])
    finally:
        store.drop()
        store.close()


def query_filters(search_filter: chunk_pb2.SearchFilter) -> list[dict]:
    """The filter clauses of a search: namespaces (required), doc ids, block types, metadata, ACL."""
    filters: list[dict] = [{"terms": {"namespace": require_namespaces(search_filter)}}]
    if search_filter.doc_ids:
        filters.append({"terms": {"doc_id": list(search_filter.doc_ids)}})
    if search_filter.block_types:
        filters.append({"terms": {"block_type": [int(b) for b in search_filter.block_types]}})
    for term in metadata_terms(dict(metadata_pairs(search_filter))):
        filters.append({"term": {"meta": term}})
    groups = acl_clause_groups(search_filter)
    if groups is not None:
        # public chunks (no ACL) or one of the caller's groups
        allowed: list[dict] = [{"bool": {"must_not": {"exists": {"field": "acl"}}}}]
        if groups:
            allowed.append({"terms": {"acl": groups}})
        filters.append({"bool": {"should": allowed, "minimum_should_match": 1}})
    return filters


def _chunk(hit: dict) -> chunk_pb2.KnowledgeChunk:
    payload = hit["fields"]["payload"][0] if "fields" in hit else hit["_source"]["payload"]
    return chunk_pb2.KnowledgeChunk.FromString(base64.b64decode(payload))


def _reason(error) -> str:
    if isinstance(error, dict):
        return f"{error.get('type', 'error')}: {error.get('reason', '')}"
    return str(error)
