"""Token counting with the embedder's own tokenizer. The parser loads only the tokenizer, never the model."""

from __future__ import annotations

import json
import os
import threading
from functools import lru_cache
from pathlib import Path

from shared.embedders import resolve_model_dir

_FALLBACK_LIMIT = 512


class TokenCounter:
    """Counts tokens (special tokens included) as the embedder will see them; `limit` is its input window."""

    def __init__(self, model: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoTokenizer

        model_dir = resolve_model_dir(model)
        self.model = model
        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self.limit = _input_limit(model_dir, self._tokenizer)
        self._lock = threading.Lock()  # a fast tokenizer's Rust state is not safe to share across threads

    def count(self, text: str) -> int:
        with self._lock:
            return len(self._tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"])


def _input_limit(model_dir: Path, tokenizer) -> int:
    """sentence-transformers' max_seq_length when present (what encode() truncates to), else the tokenizer's."""
    config = model_dir / "sentence_bert_config.json"
    if config.exists():
        limit = json.loads(config.read_text()).get("max_seq_length")
        if limit:
            return int(limit)
    limit = getattr(tokenizer, "model_max_length", 0) or 0
    return int(limit) if 0 < limit < 1_000_000 else _FALLBACK_LIMIT


_build_lock = threading.Lock()


def counter_for(model: str) -> TokenCounter:
    # one build at a time: the first concurrent Parse calls would otherwise import transformers from
    # two threads at once, and its lazy import then fails ("cannot import name 'AutoTokenizer'")
    with _build_lock:
        return _cached_counter(model)


@lru_cache(maxsize=8)
def _cached_counter(model: str) -> TokenCounter:
    return TokenCounter(model)
