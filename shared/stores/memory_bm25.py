"""In-memory BM25 beside the embedded SQLite FTS5 store, scoring exactly as FTS5's `bm25()`.

SQLite stays the durable copy; this index is rebuilt from its rows whenever a store opens and is
changed by the store in the same call as every write, so the two never diverge. It holds postings
(term -> row slots and term frequencies, append-only `array`s), each row's token count and the
columns the store filters on (namespace, document, block type) as numpy arrays; metadata and ACL
filters are answered by the store's own SQL on the candidate rows.

Terms are FTS5's own: each analyzed word (`shared.text.analyze`, stored space-separated in the
FTS5 table) is cut and stemmed by an in-memory FTS5 table with the store's tokenizer, so the
porter stemming and unicode61 splitting are SQLite's, not a re-implementation. Scores follow
fts5_aux.c: k1 1.2, b 0.75, idf = log((N - n + 0.5) / (n + 0.5)) (1e-6 when not positive), N and
the average row length over every row of the database, one term per quoted query word, summed.
"""

from __future__ import annotations

import math
import sqlite3
import sys
import threading
from array import array
from collections.abc import Iterable, Sequence
from itertools import chain
from dataclasses import dataclass, replace

import numpy as np

K1 = 1.2
B = 0.75
TOKENIZE = "porter unicode61 remove_diacritics 2"
_TF_MAX = 65535  # term frequencies are stored as uint16
_INT_BYTES = sys.getsizeof(2**20)  # a Python int past the small-int cache


class Fts5Tokenizer:
    """Words to FTS5 tokens through an in-memory FTS5 table with the store's tokenizer.

    The tokens of the last `remembered` distinct words are kept (oldest forgotten first): word
    frequencies are Zipfian, so most words of a batch or a query are known; tenants choose query
    words, so what is kept must stay bounded.
    """

    def __init__(self, tokenize: str = TOKENIZE, *, remembered: int = 100_000):
        self._lock = threading.Lock()
        self._remembered = remembered
        self._known: dict[str, tuple[str, ...]] = {}  # insertion-ordered: oldest first
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.execute(f"CREATE VIRTUAL TABLE words USING fts5(word, tokenize='{tokenize}')")
        self._db.execute("CREATE VIRTUAL TABLE word_tokens USING fts5vocab(words, instance)")

    def tokens(self, words: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Each distinct word's tokens in order (empty when FTS5 keeps nothing of it)."""
        with self._lock:
            known = self._known
            found = {word: known.get(word) for word in words}
            unknown = [word for word, tokens in found.items() if tokens is None]
            if not unknown:
                return found
            new: list[list[str]] = [[] for _ in unknown]
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT INTO words(rowid, word) VALUES (?, ?)", enumerate(unknown))
                for row, term in self._db.execute("SELECT doc, term FROM word_tokens ORDER BY doc, offset"):
                    new[row].append(term)
            finally:
                self._db.execute("ROLLBACK")
            for word, terms in zip(unknown, new):
                found[word] = known[word] = tuple(terms)
            for _ in range(len(known) - self._remembered):
                del known[next(iter(known))]
            return found


_shared_lock = threading.Lock()
_shared: Fts5Tokenizer | None = None


def shared_tokenizer() -> Fts5Tokenizer:
    """One tokenizer (and word memory) for every store of the process: the tokenizer is the same for all."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Fts5Tokenizer()
        return _shared


@dataclass(frozen=True)
class IndexedRow:
    """One stored row as the index needs it: SQLite rowid, FTS5 terms text and the filtered columns."""

    rowid: int
    terms: str
    namespace: str
    doc_id: str
    block_type: int


@dataclass(frozen=True)
class RowFilter:
    """The vectorised part of a search filter; None means "no restriction"."""

    namespaces: Sequence[str]
    doc_ids: Sequence[str] | None = None
    block_types: Sequence[int] | None = None


class _Columns:
    """Per-slot numpy columns that grow by doubling (a slot is never reused until compaction)."""

    DTYPES = {"alive": np.bool_, "length": np.int32, "rowid": np.int64, "namespace": np.int32,
              "doc": np.int32, "block_type": np.int32}

    def __init__(self, capacity: int = 1024):
        self.size = 0
        self.arrays = {name: np.zeros(capacity, dtype) for name, dtype in self.DTYPES.items()}

    def append(self, values: dict[str, np.ndarray]) -> np.ndarray:
        count = len(values["rowid"])
        capacity = len(self.arrays["rowid"])
        if self.size + count > capacity:
            grown = max(capacity * 2, self.size + count)
            for name, column in self.arrays.items():
                wider = np.zeros(grown, column.dtype)
                wider[:self.size] = column[:self.size]
                self.arrays[name] = wider
        slots = np.arange(self.size, self.size + count)
        for name, column in self.arrays.items():
            column[slots] = values[name]
        self.size += count
        return slots

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def nbytes(self) -> int:
        return sum(column.nbytes for column in self.arrays.values())


class MemoryBm25Index:
    """BM25 postings of one SQLite FTS5 table. Not thread-safe: the store calls it under its own lock."""

    def __init__(self, tokenizer: Fts5Tokenizer, *, compact_after: int = 65536):
        """`compact_after`: dead postings (at least) before deleted rows' postings are dropped."""
        self._tokenizer = tokenizer
        self._compact_after = compact_after
        self.clear()

    def clear(self) -> None:
        self._term_ids: dict[str, int] = {}
        self._slots: list[array] = []  # per term id: row slots (int32), ascending
        self._freqs: list[array] = []  # per term id: term frequency in that row (uint16)
        self._rows = _Columns()
        self._slot_of_rowid: dict[int, int] = {}
        self._namespace_codes: dict[str, int] = {}
        self._doc_codes: dict[str, int] = {}
        self._live_rows = 0
        self._live_tokens = 0
        self._dead_postings = 0

    # -- writes ------------------------------------------------------------------------------

    def prepare(self, rows: Sequence[IndexedRow]) -> PreparedRows:
        """Tokenize rows outside the store's lock; `add` then only files them.

        Work per word occurrence stays in C (split, chain, one dict look-up through `map`); each
        distinct word of the batch is tokenized once.
        """
        words_of_row = [row.terms.split() for row in rows]
        occurrences = list(chain.from_iterable(words_of_row))
        distinct = list(dict.fromkeys(occurrences))
        position = {word: i for i, word in enumerate(distinct)}
        word_column = np.fromiter(map(position.__getitem__, occurrences), np.int64, len(occurrences))
        tokens_of = self._tokenizer.tokens(distinct)
        return PreparedRows(rows, np.array([len(w) for w in words_of_row], np.int64), word_column,
                            [tokens_of[word] for word in distinct])

    def add(self, prepared: PreparedRows) -> None:
        """File prepared rows (their rowids must not be in the index: remove replaced rows first)."""
        if not prepared.rows:
            return
        # term ids of each distinct word's tokens, flattened, with where each word's run starts
        term_ids = self._term_ids
        word_terms = []
        for tokens in prepared.word_tokens:
            for token in tokens:
                term_id = term_ids.get(token)
                if term_id is None:
                    term_id = term_ids[token] = len(self._slots)
                    self._slots.append(array("i"))
                    self._freqs.append(array("H"))
                word_terms.append(term_id)
        tokens_per_word = np.array([len(t) for t in prepared.word_tokens], np.int64)
        word_starts = np.cumsum(tokens_per_word) - tokens_per_word
        # every token occurrence: its term id and its row
        per_occurrence = tokens_per_word[prepared.word_column]
        total = int(per_occurrence.sum())
        before = np.cumsum(per_occurrence) - per_occurrence
        term_column = np.array(word_terms, np.int64)[
            np.repeat(word_starts[prepared.word_column] - before, per_occurrence) + np.arange(total)]
        row_of_word = np.repeat(np.arange(len(prepared.rows)), prepared.words_per_row)
        lengths = np.bincount(row_of_word, weights=per_occurrence, minlength=len(prepared.rows)).astype(np.int64)
        slots = self._rows.append({
            "alive": np.ones(len(lengths), np.bool_),
            "length": lengths,
            "rowid": np.array([row.rowid for row in prepared.rows], np.int64),
            "namespace": np.array([self._code(self._namespace_codes, r.namespace) for r in prepared.rows]),
            "doc": np.array([self._code(self._doc_codes, r.doc_id) for r in prepared.rows]),
            "block_type": np.array([r.block_type for r in prepared.rows]),
        })
        for row, slot in zip(prepared.rows, slots.tolist()):
            self._slot_of_rowid[row.rowid] = slot
        self._live_rows += len(lengths)
        self._live_tokens += total
        if not total:
            return
        slot_column = np.repeat(slots[row_of_word], per_occurrence)
        # one (term, slot) pair per distinct term of a row, with its count, grouped by term
        pairs, counts = np.unique(term_column * self._rows.size + slot_column, return_counts=True)
        pair_terms, pair_slots = np.divmod(pairs, self._rows.size)
        starts = np.flatnonzero(np.r_[True, pair_terms[1:] != pair_terms[:-1]])
        ends = np.r_[starts[1:], len(pairs)]
        pair_slots = pair_slots.astype(np.int32)
        counts = np.minimum(counts, _TF_MAX).astype(np.uint16)
        for term_id, start, end in zip(pair_terms[starts].tolist(), starts.tolist(), ends.tolist()):
            self._slots[term_id].frombytes(pair_slots[start:end].tobytes())
            self._freqs[term_id].frombytes(counts[start:end].tobytes())

    def remove(self, rowids: Iterable[int]) -> None:
        """Forget rows; their postings stay until compaction, skipped as dead."""
        for rowid in rowids:
            slot = self._slot_of_rowid.pop(rowid, None)
            if slot is None:
                continue
            self._rows.alive[slot] = False
            self._live_rows -= 1
            self._live_tokens -= int(self._rows.length[slot])
            self._dead_postings += int(self._rows.length[slot])  # an upper bound: tokens, not distinct terms
        if self._dead_postings > max(self._compact_after, self._live_tokens):
            self._compact()

    def _compact(self) -> None:
        """Drop dead rows' postings and renumber the live slots densely."""
        alive = self._rows.alive[:self._rows.size]
        new_slot = np.cumsum(alive) - 1
        for term_id, (slots, freqs) in enumerate(zip(self._slots, self._freqs)):
            if not slots:
                continue
            old = np.frombuffer(slots, np.int32).copy()
            keep = alive[old]
            self._slots[term_id] = array("i", new_slot[old[keep]].astype(np.int32).tobytes())
            self._freqs[term_id] = array("H", np.frombuffer(freqs, np.uint16)[keep].tobytes())
        kept = _Columns(max(1024, int(alive.sum())))
        kept.append({name: column[:self._rows.size][alive] for name, column in self._rows.arrays.items()})
        self._rows = kept
        self._slot_of_rowid = {int(rowid): slot for slot, rowid in enumerate(kept.rowid[:kept.size].tolist())}
        self._dead_postings = 0

    @staticmethod
    def _code(codes: dict[str, int], value: str) -> int:
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(codes)
        return code

    # -- reads -------------------------------------------------------------------------------

    def query_tokens(self, words: Sequence[str]) -> list[str] | None:
        """Each query word's one FTS5 token, or None when a word is not exactly one token: FTS5
        matches such a word as a phrase, by position, which this index does not hold."""
        tokens_of = self._tokenizer.tokens(words)
        if any(len(tokens_of[w]) != 1 for w in words):
            return None
        return [tokens_of[w][0] for w in words]

    def scores(self, tokens: Sequence[str], row_filter: RowFilter) -> tuple[np.ndarray, np.ndarray]:
        """(rowids, scores) of every row holding a query token and passing the filter, unordered.

        `tokens` may repeat (two query words with one stem): FTS5 scores each quoted word as its
        own phrase, and so does this.
        """
        columns = self._rows
        if not self._live_rows:
            return np.zeros(0, np.int64), np.zeros(0)
        average_length = self._live_tokens / self._live_rows
        hit_slots, hit_scores = [], []
        for token in tokens:
            term_id = self._term_ids.get(token)
            if term_id is None:
                continue
            slots = np.frombuffer(self._slots[term_id], np.int32).copy()
            freqs = np.frombuffer(self._freqs[term_id], np.uint16).astype(np.float64)
            live = columns.alive[slots]
            slots, freqs = slots[live], freqs[live]
            if not len(slots):
                continue
            idf = math.log((self._live_rows - len(slots) + 0.5) / (len(slots) + 0.5))
            idf = idf if idf > 0 else 1e-6
            norm = K1 * (1 - B + B * columns.length[slots] / average_length)
            hit_slots.append(slots)
            hit_scores.append(idf * freqs * (K1 + 1) / (freqs + norm))
        if not hit_slots:
            return np.zeros(0, np.int64), np.zeros(0)
        slots = np.concatenate(hit_slots)
        scores = np.concatenate(hit_scores)
        order = np.argsort(slots, kind="stable")
        slots, scores = slots[order], scores[order]
        starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]])
        slots, scores = slots[starts], np.add.reduceat(scores, starts)
        keep = self._passes(slots, row_filter)
        return columns.rowid[slots[keep]], scores[keep]

    def _passes(self, slots: np.ndarray, row_filter: RowFilter) -> np.ndarray:
        columns = self._rows
        keep = np.isin(columns.namespace[slots], self._codes_of(self._namespace_codes, row_filter.namespaces))
        if row_filter.doc_ids is not None:
            keep &= np.isin(columns.doc[slots], self._codes_of(self._doc_codes, row_filter.doc_ids))
        if row_filter.block_types is not None:
            keep &= np.isin(columns.block_type[slots], np.array(list(row_filter.block_types), np.int64))
        return keep

    @staticmethod
    def _codes_of(codes: dict[str, int], values: Sequence[str]) -> np.ndarray:
        return np.array([codes[v] for v in values if v in codes], np.int64)

    # -- size --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._live_rows

    def nbytes(self) -> int:
        """Bytes the index holds: postings buffers and objects, row columns, the term and rowid maps."""
        postings = sum(sys.getsizeof(s) + sys.getsizeof(f) for s, f in zip(self._slots, self._freqs))
        postings += sys.getsizeof(self._slots) + sys.getsizeof(self._freqs)
        terms = sys.getsizeof(self._term_ids) + sum(sys.getsizeof(t) + _INT_BYTES for t in self._term_ids)
        rowids = sys.getsizeof(self._slot_of_rowid) + 2 * _INT_BYTES * len(self._slot_of_rowid)
        codes = sum(sys.getsizeof(c) + sum(sys.getsizeof(v) + _INT_BYTES for v in c)
                    for c in (self._namespace_codes, self._doc_codes))
        return postings + terms + rowids + codes + self._rows.nbytes()


@dataclass(frozen=True)
class PreparedRows:
    """Rows with their FTS5 tokens, ready for `MemoryBm25Index.add`."""

    rows: Sequence[IndexedRow]
    words_per_row: np.ndarray  # analyzed words in each row
    word_column: np.ndarray  # every word occurrence, row by row, as an index into word_tokens
    word_tokens: list[tuple[str, ...]]  # the FTS5 tokens of each distinct word

    def with_rowids(self, rowids: Sequence[int]) -> PreparedRows:
        """The same rows under the rowids SQLite gave them."""
        return replace(self, rows=[replace(row, rowid=rowid) for row, rowid in zip(self.rows, rowids, strict=True)])


def ranked(rowids: np.ndarray, scores: np.ndarray, count: int) -> np.ndarray:
    """Positions of the `count` best scores, best first (ties by rowid, so the order is deterministic)."""
    if count < len(scores):
        top = np.argpartition(-scores, count - 1)[:count]
        # keep every row tied with the last one, so the rowid tie-break is the same at any `count`
        top = np.flatnonzero(scores >= scores[top].min())
    else:
        top = np.arange(len(scores))
    return top[np.lexsort((rowids[top], -scores[top]))][:count]
