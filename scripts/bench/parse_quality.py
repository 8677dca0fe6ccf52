"""Parser quality per format against reference markdown (tests/golden/parse_reference).

What it measures
  Every document of the reference set (manifest.tsv: public test files under files/, and
  documents of ../shared/data/docs) is parsed by the parser's domain function
  (`parse_document`, default structure chunker, OCR on for the `scan` group), and its chunks
  are compared with the reference markdown the team wrote for it:
  - word recall: share of the reference's words (a multiset) found in the chunks' text and
    headings (each distinct heading path counted once);
  - word precision: share of those words that are in the reference;
  - heading recall: share of the reference's `#` headings found in the chunks' heading paths
    (compared as words, section numbers ignored);
  - tables kept: share of the reference's Markdown tables of which one table chunk (its split
    parts joined) holds at least 70% of the cell words.
  Words are NFKC-normalised, lower-cased runs of letters or digits; each CJK ideograph is one
  word. A refused document counts as nothing found (and is listed). Numbers are micro-averages
  per group (sums over documents), printed for the `dev` split (used while tuning heuristics),
  the `unseen` split and both.

Run from the repository root:
    python scripts/bench/parse_quality.py
    python scripts/bench/parse_quality.py --group pdf --verbose
    python scripts/bench/parse_quality.py --check tests/golden/parse_reference/floors.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
os.environ.setdefault("SCARF_NO_ANALYTICS", "true")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import unicodedata  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shared.config import ParserConfig  # noqa: E402
from shared.contracts import chunk_pb2  # noqa: E402

REFERENCE_DIR = ROOT / "tests" / "golden" / "parse_reference"
SHARED_DOCS = ROOT.parent / "shared" / "data" / "docs"
TABLE_KEPT_SHARE = 0.7
_WORD = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_SECTION_NUMBER = re.compile(r"^\d+(?:\.\d+)*\.?\s*")


@dataclass(frozen=True)
class Entry:
    source: str   # files/NAME (in the repository) or shared:SUBDIR/NAME (../shared/data/docs)
    group: str
    split: str
    ocr: bool

    @property
    def name(self) -> str:
        return self.source.rsplit("/", 1)[-1]

    @property
    def path(self) -> Path:
        if self.source.startswith("shared:"):
            return SHARED_DOCS / self.source.removeprefix("shared:")
        return REFERENCE_DIR / self.source


@dataclass
class Reference:
    words: Counter
    headings: list[list[str]]
    tables: list[Counter]


@dataclass
class Score:
    ref_words: int = 0
    out_words: int = 0
    matched_words: int = 0
    headings: int = 0
    headings_found: int = 0
    tables: int = 0
    tables_kept: int = 0
    refused: list[str] = field(default_factory=list)

    def add(self, other: Score) -> None:
        for name in ("ref_words", "out_words", "matched_words", "headings", "headings_found", "tables",
                     "tables_kept"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.refused.extend(other.refused)

    def numbers(self) -> dict[str, float | None]:
        return {"word_recall": _share(self.matched_words, self.ref_words),
                "word_precision": _share(self.matched_words, self.out_words),
                "heading_recall": _share(self.headings_found, self.headings),
                "tables_kept": _share(self.tables_kept, self.tables)}


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def heading_words(text: str) -> list[str]:
    return words(_SECTION_NUMBER.sub("", unicodedata.normalize("NFKC", text).strip()))


def load_manifest() -> list[Entry]:
    entries = []
    for line in (REFERENCE_DIR / "manifest.tsv").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            source, group, split, ocr, _ = line.split("\t")
            entries.append(Entry(source=source, group=group, split=split, ocr=ocr == "yes"))
    return entries


def load_reference(entry: Entry) -> Reference:
    """Words, `#` headings and Markdown tables of the reference (table separator rows are not words)."""
    text = (REFERENCE_DIR / "reference" / f"{entry.name}.md").read_text(encoding="utf-8")
    headings, tables, table_lines, all_words = [], [], [], Counter()
    for line in text.split("\n") + [""]:  # not splitlines(): formulas hold U+001C–U+001E
        stripped = line.strip()
        if stripped.startswith("|"):
            if not re.fullmatch(r"\|[\s:|-]*", stripped):
                table_lines.append(stripped)
            continue
        if table_lines:
            tables.append(Counter(words(" ".join(table_lines))))
            table_lines = []
        if stripped.startswith("#") and re.match(r"#{1,6}\s", stripped):
            stripped = stripped.lstrip("#").strip()
            headings.append(heading_words(stripped))
        all_words.update(words(stripped))
    for table in tables:
        all_words.update(table)
    return Reference(words=all_words, headings=headings, tables=tables)


def parse(entry: Entry) -> list[chunk_pb2.KnowledgeChunk]:
    """The chunks of the document and of its attachments."""
    from services.parser.parser import parse_document

    result = parse_document(kb="bench", namespace="bench", filename=entry.name, data=entry.path.read_bytes(),
                            parser=ParserConfig(ocr=entry.ocr))
    chunks, pending = [], [result]
    while pending:
        current = pending.pop()
        chunks.extend(current.chunks)
        pending.extend(current.attachments)
    return chunks


def output_tables(chunks: list[chunk_pb2.KnowledgeChunk]) -> list[Counter]:
    """Each table chunk's words; the parts of one split table are joined."""
    tables: dict[str, Counter] = {}
    for index, chunk in enumerate(chunks):
        if chunk.block_type == chunk_pb2.BLOCK_TYPE_TABLE:
            tables.setdefault(chunk.group_id or str(index), Counter()).update(words(chunk.raw_content))
    return list(tables.values())


def score(reference: Reference, chunks: list[chunk_pb2.KnowledgeChunk]) -> Score:
    found = Counter()
    for chunk in chunks:
        found.update(words(chunk.raw_content))
    for title in {tuple(chunk.heading_path) for chunk in chunks if chunk.heading_path}:
        found.update(words(title[-1]))  # a heading's text lives in its chunks' heading path
    paths = {tuple(heading_words(title)) for chunk in chunks for title in chunk.heading_path}
    tables = output_tables(chunks)
    kept = sum(1 for table in reference.tables
               if any(sum((table & candidate).values()) >= TABLE_KEPT_SHARE * sum(table.values())
                      for candidate in tables))
    return Score(ref_words=sum(reference.words.values()), out_words=sum(found.values()),
                 matched_words=sum((reference.words & found).values()),
                 headings=len(reference.headings),
                 headings_found=sum(1 for heading in reference.headings if tuple(heading) in paths),
                 tables=len(reference.tables), tables_kept=kept)


def evaluate(entries: list[Entry], *, verbose: bool = False) -> dict[tuple[str, str], Score]:
    """Scores per (group, split)."""
    from services.parser import errors

    totals: dict[tuple[str, str], Score] = {}
    for entry in entries:
        reference = load_reference(entry)
        try:
            result = score(reference, parse(entry))
        except errors.RagkbError as error:
            result = Score(ref_words=sum(reference.words.values()), headings=len(reference.headings),
                           tables=len(reference.tables), refused=[f"{entry.name}: {error}"])
        if verbose:
            print(f"  {entry.group:8} {entry.split:6} {entry.name:45} " + _row(result.numbers()), flush=True)
        totals.setdefault((entry.group, entry.split), Score()).add(result)
    return totals


def _row(numbers: dict[str, float | None]) -> str:
    return "  ".join(f"{'—' if value is None else f'{value:.0%}':>6}" for value in numbers.values())


def summarize(totals: dict[tuple[str, str], Score]) -> dict[str, dict[str, dict]]:
    """{group: {split: numbers}} with an `all` split and an `all` group."""
    summary: dict[str, dict[str, dict]] = {}
    merged: dict[tuple[str, str], Score] = {}
    for (group, split), result in totals.items():
        for key in ((group, split), (group, "all"), ("all", split), ("all", "all")):
            merged.setdefault(key, Score()).add(result)
    for (group, split), result in sorted(merged.items()):
        summary.setdefault(group, {})[split] = {**result.numbers(), "refused": result.refused}
    return summary


def print_summary(summary: dict[str, dict[str, dict]]) -> None:
    print(f"{'group':9} {'split':7} {'recall':>6}  {'prec.':>6}  {'heads':>6}  {'tables':>6}")
    for group, splits in summary.items():
        for split in ("dev", "unseen", "all"):
            if split in splits:
                numbers = {k: v for k, v in splits[split].items() if k != "refused"}
                print(f"{group:9} {split:7} {_row(numbers)}")
    refused = sorted({item for splits in summary.values() for numbers in splits.values()
                      for item in numbers["refused"]})
    for item in refused:
        print(f"refused: {item[:200]}")


def check(summary: dict[str, dict[str, dict]], floors: dict[str, dict[str, float]]) -> list[str]:
    """Each floor is a number per group (all splits) that the measured value must reach."""
    failures = []
    for group, metrics in floors.items():
        measured = summary.get(group, {}).get("all", {})
        for metric, floor in metrics.items():
            value = measured.get(metric)
            if value is None or value + 1e-9 < floor:
                failures.append(f"{group} {metric}: {value if value is None else round(value, 4)} < floor {floor}")
    return failures


def floors_of(summary: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """This run's numbers per group (both splits), rounded down to whole percents."""
    return {group: {metric: math.floor(value * 100) / 100 for metric, value in splits["all"].items()
                    if metric != "refused" and value is not None}
            for group, splits in summary.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--group", action="append", help="only these groups (pdf, scan, docx, …)")
    parser.add_argument("--split", choices=("dev", "unseen"), help="only one split")
    parser.add_argument("--verbose", action="store_true", help="a line per document")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--check", type=Path, help="floors JSON; exit 1 when a number falls below its floor")
    parser.add_argument("--write-floors", type=Path, help="write this run's numbers (rounded down) as the floors")
    args = parser.parse_args()
    entries = [e for e in load_manifest() if (not args.group or e.group in args.group)
               and (not args.split or e.split == args.split)]
    missing = [str(e.path) for e in entries if not e.path.exists()]
    if missing:
        sys.exit(f"reference documents missing (see ../shared/data/README.md): {', '.join(missing)}")
    logging.disable(logging.WARNING)
    summary = summarize(evaluate(entries, verbose=args.verbose))
    print_summary(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, ensure_ascii=False))
    if args.write_floors:
        args.write_floors.write_text(json.dumps(floors_of(summary), indent=1, sort_keys=True) + "\n")
    if args.check:
        failures = check(summary, json.loads(args.check.read_text()))
        for failure in failures:
            print(f"BELOW FLOOR: {failure}")
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
