"""What the KB-version tests share: documents, a golden question set, a query load that records what
answered, and the indexer's objects built the way services/indexer/main.py builds them."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.indexer.indexer import Indexer
from services.indexer.reconciler import Reconciler
from services.indexer.registry import DocumentRegistry
from services.indexer.versions import VersionManager
from services.retriever.retriever import Retriever
from shared.contracts import chunk_pb2
from shared.kb import KnowledgeBaseCatalog
from shared.kb_versions import version_config

DOCS = {
    "charging": "The charging dock charges the battery from 20% to 80% in 45 minutes.",
    "speed": "The top speed of the robot is 1.8 metres per second in open aisles.",
    "payload": "The robot carries loads of up to 300 kilograms on its lifting module.",
    "safety": "A laser scanner stops the robot when a person steps into its path.",
    "wifi": "The fleet manager talks to every robot over the warehouse wireless network.",
    "cleaning": "Wipe the lidar window with a dry microfibre cloth once a week.",
    "storage": "Store spare batteries in a cool room below 25 degrees Celsius.",
    "warranty": "The warranty covers motors and electronics for three years.",
}
# paraphrases that share no word with their document: only a dense route that understands them finds it
GOLDEN = [
    ("how long does refilling the power cell take", "charging"),
    ("how fast can it drive", "speed"),
    ("what is the heaviest weight it can lift", "payload"),
    ("does it halt for pedestrians", "safety"),
    ("how is the machine guarantee arranged", "warranty"),
    ("what temperature should reserve cells be kept at", "storage"),
]


def chunk(kb: str, doc_id: str, text: str) -> chunk_pb2.KnowledgeChunk:
    return chunk_pb2.KnowledgeChunk(chunk_id=hashlib.sha256(f"{doc_id}:{text}".encode()).hexdigest()[:32],
                                    doc_id=doc_id, kb=kb, namespace="default", content=text, raw_content=text)


def write_golden(path: Path) -> Path:
    path.write_text("".join(json.dumps({"query": q, "relevant": [doc]}) + "\n" for q, doc in GOLDEN),
                    encoding="utf-8")
    return path


@dataclass
class Indexing:
    catalog: KnowledgeBaseCatalog
    registry: DocumentRegistry
    indexer: Indexer
    versions: VersionManager
    reconciler: Reconciler

    @classmethod
    def build(cls, settings, *, retention: int = 1, retention_s: float = 0.0, publish=None) -> Indexing:
        """`publish`: where re-index jobs go (None: run on a thread here, as the embedded indexer does)."""
        catalog = KnowledgeBaseCatalog.for_settings(settings)
        registry = DocumentRegistry.for_settings(settings)
        indexer = Indexer(settings, catalog, registry)
        reconciler = Reconciler(indexer, catalog, registry)
        return cls(catalog, registry, indexer, VersionManager(settings, catalog, registry, indexer, reconciler,
                                                              retention=retention, retention_s=retention_s,
                                                              publish=publish), reconciler)

    def stores_of(self, kb: str, version: int):
        """(embedder, keyword store, vector store) of one version."""
        return self.indexer.open_stores(version_config(self.versions.get(kb, version), self.catalog.profiles))

    def doc_ids(self, kb: str, version: int) -> set[str]:
        """The documents both stores of a version hold (each of its chunks in both)."""
        _, keyword, vector = self.stores_of(kb, version)
        return {e.doc_id for e in self.registry.list(kb)
                if e.chunk_ids and set(e.chunk_ids) <= keyword.chunk_ids(e.namespace, e.doc_id)
                & vector.chunk_ids(e.namespace, e.doc_id)}

    def index(self, kb: str, doc_id: str, text: str) -> None:
        config = self.catalog.get(kb)  # the live config, as the gateway resolves it per request
        self.indexer.index_document(config, "default", doc_id, hashlib.sha256(text.encode()).hexdigest(),
                                    [chunk(kb, doc_id, text)])


class QueryLoad:
    """Asks questions without pause on a thread, in turn from `queries`. `ask(query)` returns what to record
    for the answer (which version answered) and a problem ('' = none: results, no degraded route); errors
    and problems are kept in `failures`, which the tests assert is empty."""

    def __init__(self, queries: list[str], ask: Callable[[str], tuple[object, str]]):
        self._queries, self._ask = queries, ask
        self.answered: list = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> QueryLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(120)

    def wait_for(self, count: int) -> None:
        """Until at least `count` more queries have been answered."""
        target = len(self.answered) + count
        while len(self.answered) < target and self._thread.is_alive() and not self._stop.wait(0.05):
            pass

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            query = self._queries[number % len(self._queries)]
            number += 1
            try:
                answered, problem = self._ask(query)
            except Exception as error:  # recorded: the test asserts there are none
                self.failures.append(f"{query!r}: {type(error).__name__}: {error}")
                continue
            if problem:
                self.failures.append(f"{query!r}: {problem}")
            self.answered.append(answered)


def retrieving(settings, kb: str) -> Callable[[str], tuple[int, str]]:
    """`ask` for QueryLoad: the retriever on the config the catalog holds now, as the gateway resolves each
    request; records the version that answered."""
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    retriever = Retriever(settings)
    search_filter = chunk_pb2.SearchFilter(namespaces=["default"])

    def ask(query: str) -> tuple[int, str]:
        config = catalog.get(kb)
        result = retriever.retrieve(config, query, search_filter)
        problem = "" if result.candidates and not result.degraded else \
            f"{len(result.candidates)} results, degraded {result.degraded}"
        return config.index_version, problem

    return ask
