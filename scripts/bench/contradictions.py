"""Claim-check precision and recall on faithful and perturbed sentences built from ../shared/data.

    python scripts/bench/contradictions.py [--data ../shared/data] [--per-kind 250] [--method lexical]

Sentences come from the SQuAD 2.0 subset paragraphs and SciFact abstracts. Each sentence
becomes either a faithful claim (the sentence itself, or the sentence cut at a clause
boundary) or a perturbed one (a negation inserted or removed, a number changed, a word
replaced by its antonym, two names swapped), and is checked as "<claim> [1]" against its
whole passage by the product's `ClaimChecker`. A perturbed claim counts as caught when it is
not "supported"; a faithful one counts as a false flag when it is not.

The perturbations are of the kinds the offline rules look for, so this measures how reliably
they fire on real text (alignment, tokenisation, numbers in context), not how well they
generalise to other kinds of errors.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

import _setup  # noqa: F401  (threads, offline hub, repository on sys.path)

from services.generator.claims import ClaimChecker  # noqa: E402
from services.generator.verifiers import _ANTONYMS  # noqa: E402
from shared.contracts import chunk_pb2  # noqa: E402
from shared.text import split_sentences  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
_AUX = re.compile(r"\b(is|was|are|were|has|had|have|can|could|will|would|does|did|do)\b")
_NOT = re.compile(r"\s+not\b")
_NUMBER = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?(?![\w.])")
_NAME = re.compile(r"(?<!^)(?<![.!?] )\b[A-Z][a-z]{2,}(?:\s+[A-Z][a-z]{2,})*")
_SWAP = {a: b for a, b in _ANTONYMS if re.fullmatch(r"[a-z]+", a)} | {
    b: a for a, b in _ANTONYMS if re.fullmatch(r"[a-z]+", b)}


def passages(data: Path, scifact_docs: int) -> list[str]:
    texts = [json.loads(line)["text"] for line in open(data / "squad2_subset" / "corpus.jsonl", encoding="utf-8")]
    scifact = [json.loads(line)["text"] for line in open(data / "scifact" / "corpus.jsonl", encoding="utf-8")]
    random.Random(5).shuffle(scifact)
    return texts + scifact[:scifact_docs]


def negate(sentence: str) -> str | None:
    if _NOT.search(sentence):
        return _NOT.sub("", sentence, count=1)
    match = _AUX.search(sentence)
    return sentence[:match.end()] + " not" + sentence[match.end():] if match else None


def change_number(sentence: str) -> str | None:
    match = _NUMBER.search(sentence)
    if not match:
        return None
    value = match.group(0)
    changed = str(int(value) + (10 if len(value) == 4 else 3)) if value.isdigit() else f"{float(value) * 2:g}"
    return sentence[:match.start()] + changed + sentence[match.end():]


def antonym(sentence: str) -> str | None:
    for word in re.findall(r"[a-z]+", sentence):
        if word in _SWAP:
            return re.sub(rf"\b{word}\b", _SWAP[word], sentence, count=1)
    return None


def swap_names(sentence: str) -> str | None:
    names = list(dict.fromkeys(m.group(0) for m in _NAME.finditer(sentence)))
    if len(names) < 2:
        return None
    first, second = names[0], names[1]
    return sentence.replace(first, "\0").replace(second, first).replace("\0", second)


PERTURBATIONS = {"negation": negate, "number": change_number, "antonym": antonym, "swapped names": swap_names}


def faithful(sentence: str) -> str:
    """The sentence, or its first clause when it has a long one (still entailed by the passage)."""
    head, comma, _ = sentence.partition(", ")
    return head + "." if comma and len(head.split()) >= 6 else sentence


def build(data: Path, per_kind: int, scifact_docs: int) -> list[tuple[str, str, str]]:
    """(kind, claim, passage) rows: `per_kind` faithful and `per_kind` perturbed, types round-robin."""
    rows: list[tuple[str, str, str]] = []
    pending = {name: [] for name in PERTURBATIONS}
    faithful_rows = []
    for passage in passages(data, scifact_docs):
        for sentence in split_sentences(passage):
            if len(sentence.split()) < 6 or sentence.endswith("?"):
                continue
            key = int(hashlib.sha1(sentence.encode()).hexdigest()[:8], 16)
            if key % 2 == 0:
                faithful_rows.append(("faithful", faithful(sentence), passage))
                continue
            for name, perturb in PERTURBATIONS.items():
                changed = perturb(sentence)
                if changed and changed != sentence:
                    pending[name].append((name, changed, passage))
                    break
    random.Random(7).shuffle(faithful_rows)
    rows.extend(faithful_rows[:per_kind])
    perturbed: list[tuple[str, str, str]] = []
    while len(perturbed) < per_kind and any(pending.values()):
        for name in PERTURBATIONS:
            if pending[name] and len(perturbed) < per_kind:
                perturbed.append(pending[name].pop(0))
    return rows + perturbed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--per-kind", type=int, default=250)
    parser.add_argument("--scifact-docs", type=int, default=300)
    parser.add_argument("--method", default="lexical", choices=("lexical", "lexical+embedding"))
    args = parser.parse_args()
    embed, languages = None, ("en",)
    if args.method == "lexical+embedding":
        from shared import components
        from shared.config import KBConfig

        embedder = components.embedder_for(KBConfig(name="bench"))
        embed, languages = embedder.embed_documents, tuple(embedder.languages)
    checker = ClaimChecker(args.method, embed=embed, embed_languages=languages)
    rows = build(args.data, args.per_kind, args.scifact_docs)
    flagged: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for kind, claim, passage in rows:
        chunk = chunk_pb2.KnowledgeChunk(raw_content=passage, content=passage)
        check = checker.check(f"{claim.rstrip('.')} [1].", [chunk_pb2.Candidate(chunk=chunk)]).checks[0]
        total[kind] += 1
        flagged[kind] += check.verdict != "supported"
    perturbed_total = sum(n for k, n in total.items() if k != "faithful")
    caught = sum(n for k, n in flagged.items() if k != "faithful")
    false_flags = flagged["faithful"]
    precision = caught / (caught + false_flags) if caught + false_flags else float("nan")
    print(f"method {args.method}: {total['faithful']} faithful, {perturbed_total} perturbed sentences")
    for kind in ["faithful", *PERTURBATIONS]:
        if total[kind]:
            print(f"  {kind:<14} {flagged[kind]:>4}/{total[kind]:<4} flagged ({flagged[kind] / total[kind]:.1%})")
    print(f"recall (perturbed caught) {caught / perturbed_total:.3f}, precision of a flag {precision:.3f}, "
          f"faithful flagged {false_flags / total['faithful']:.3f}")


if __name__ == "__main__":
    main()
