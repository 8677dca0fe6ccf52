"""Language-aware text helpers shared by every layer.

Keyword text must be tokenized the same way at index and query time in every
keyword engine (SQLite FTS5 here, Elasticsearch later), so `analyze` is the one
tokenizer for keyword search: lower-cased Latin words plus jieba words (or
single characters) for CJK runs.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from typing import Literal

Analyzer = Literal["jieba", "char"]

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD_CHAR = f"(?:(?![{_CJK}])[^\\W_])"  # a letter or digit that is not CJK
_TOKEN = re.compile(f"[{_CJK}]+|{_WORD_CHAR}+(?:['.]{_WORD_CHAR}+)*", re.UNICODE)
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['.][A-Za-z0-9]+)*")  # _TOKEN on ASCII text, without its lookaheads
_WORD = re.compile(r"[^\W_]+(?:['.][^\W_]+)*")  # _TOKEN on text without CJK, without its lookaheads
_CJK_CHAR = re.compile(f"[{_CJK}]")
_LATIN_LETTER = re.compile(r"[A-Za-z\u00c0-\u024f]")

# Sentence ends: Chinese full-width marks always end a sentence; Latin ., ! and ?
# only when followed by whitespace (keeps "3.2.1" and "e.g." inside a sentence).
_SENTENCE_END = re.compile(r"(?<=[。！？；!?])\s*|(?<=\.)\s+|\n{2,}")

ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be been but by can could do does did for from had has have how i if in into is it "
    "its me my no not of on or our should so than that the their them then there these they this to was "
    "we were what when where which who whom why will with would you your".split()
)
CHINESE_STOPWORDS = frozenset("的 了 是 在 和 与 或 吗 呢 吧 啊 么 什么 多少 怎么 如何 哪些 哪个 为什么 有 个 请 我 你 它 这 那".split())

_jieba_lock = threading.Lock()
_jieba = None


def _get_jieba():
    global _jieba
    with _jieba_lock:
        if _jieba is None:
            import jieba

            jieba.setLogLevel(logging.WARNING)
            jieba.initialize()
            _jieba = jieba
    return _jieba


def normalize(text: str) -> str:
    """NFKC (full-width Latin/digits to half-width) and collapsed spaces."""
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"[ \t\u00a0\u3000]+", " ", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def analyze(text: str, analyzer: Analyzer = "jieba") -> list[str]:
    """Keyword tokens of `text`: lower-cased Latin words, CJK as jieba words or characters."""
    if text.isascii():  # NFKC leaves ASCII as it is and no CJK run can occur: 4 x faster on English text
        return _ASCII_TOKEN.findall(text.lower())
    normalized = unicodedata.normalize("NFKC", text).lower()
    if not _CJK_CHAR.search(normalized):  # no CJK run to cut: every token is a word as it stands (3 x faster)
        return _WORD.findall(normalized)
    tokens: list[str] = []
    for match in _TOKEN.finditer(normalized):
        piece = match.group(0)
        if _CJK_RUN.fullmatch(piece):
            if analyzer == "char":
                tokens.extend(piece)
            else:
                tokens.extend(w for w in _get_jieba().cut_for_search(piece) if w.strip())
        else:
            tokens.append(piece)
    return tokens


def query_terms(text: str, analyzer: Analyzer = "jieba") -> list[str]:
    """Distinct keyword tokens of a query, stopwords removed (all kept if nothing else remains)."""
    tokens = analyze(text, analyzer)
    kept = [t for t in tokens if t not in ENGLISH_STOPWORDS and t not in CHINESE_STOPWORDS]
    return list(dict.fromkeys(kept or tokens))


def detect_language(text: str) -> str:
    """'zh' when CJK characters dominate the letters, else 'en' (the embedder-routing distinction)."""
    cjk = len(_CJK_CHAR.findall(text))
    latin = len(_LATIN_LETTER.findall(text))
    if cjk == 0 and latin == 0:
        return "und"
    # one CJK character carries roughly a word; compare against Latin words, not letters
    return "zh" if cjk >= latin / 5 else "en"


def split_sentences(text: str) -> list[str]:
    """Split into sentences at Chinese 。！？； and Latin .!? boundaries."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


ALLOWED_CONTROLS = frozenset("\t\n\r")


def text_problem(value: str) -> str | None:
    """Why a string is not acceptable text, or None."""
    for position, char in enumerate(value):
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            return f"a lone surrogate (U+{code:04X}) at position {position}"
        if (code < 0x20 and char not in ALLOWED_CONTROLS) or code == 0x7F:
            return f"a control character (U+{code:04X}) at position {position}"
    return None
