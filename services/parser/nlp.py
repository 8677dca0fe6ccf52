"""Offline language pipeline for unstructured's text heuristics.

unstructured classifies loose text (title vs narrative) with spaCy and, when the
`en_core_web_sm` model is missing, downloads it at run time — which fails (and
hangs for minutes) on machines without internet. We install a blank English
pipeline with a rule-based sentencizer instead of any model weights:

- the official model is not on PyPI; the re-uploads there are unverified third
  party packages, and a parser should not run code of unknown origin;
- it is deterministic and costs no memory or start-up time;
- what it loses is POS tagging, so unstructured's "contains a verb" test never
  passes: some loose lines it would call NarrativeText become Text or Title.
  The chunker does not depend on that distinction: headings come from document
  structure (styles, markup, depth), and plain-text "titles" are kept as text.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_installed = False


def blank_pipeline():
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def install_offline_pipeline() -> None:
    """Make unstructured use the blank pipeline (idempotent; call before partitioning)."""
    global _installed
    with _lock:
        if _installed:
            return
        import unstructured.nlp.tokenize as tokenize

        tokenize._load_spacy_model = blank_pipeline
        tokenize._get_nlp.cache_clear()
        _installed = True
