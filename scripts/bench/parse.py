"""Parser throughput per format on ../shared/data/docs (en/ and zh/).

What it measures
  For every document, after one warm-up parse (imports, tokenizer load), `--repeat`
  timed runs of the parser's domain function (`parse_document`: unstructured, cleaning,
  structure chunking, token-safe pass with the MiniLM tokenizer), in this process.
  Per format it prints files, pages (slides/sheets; 1 for formats without pages),
  chunks, median and p95 seconds per document, pages/s and chunks/s (sums over the
  per-document medians), and the ratio of the full parse to the bare
  `unstructured.partition.auto.partition` of the same bytes measured in the same run
  (1.0 = cleaning and chunking cost nothing on top of unstructured).

Run from the repository root:
    python scripts/bench/parse.py
    python scripts/bench/parse.py --repeat 5 --docs /path/to/docs
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
os.environ.setdefault("SCARF_NO_ANALYTICS", "true")

import argparse  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.parser import formats  # noqa: E402
from services.parser.nlp import install_offline_pipeline  # noqa: E402
from services.parser.parser import parse_document  # noqa: E402

DEFAULT_DOCS = Path(__file__).resolve().parents[3] / "shared" / "data" / "docs"
MODEL = "all-MiniLM-L6-v2"


def timed(function, repeat: int) -> tuple[list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return times, result


def bare_partition(name: str, data: bytes):
    from unstructured.partition.auto import partition

    kwargs = {"strategy": "fast", "languages": ["eng"]} if name.endswith(".pdf") else {}
    return partition(file=io.BytesIO(data), metadata_filename=name, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="folder with en/ and zh/ subfolders")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per document (median is used)")
    args = parser.parse_args()
    files = sorted(p for folder in ("en", "zh") for p in (args.docs / folder).glob("*") if p.is_file())
    if not files:
        sys.exit(f"no documents under {args.docs}/en or {args.docs}/zh (see ../shared/data/README.md)")
    logging.disable(logging.WARNING)  # pdfminer and unstructured are chatty about harmless quirks
    install_offline_pipeline()
    rows: dict[str, dict] = {}
    for path in files:
        data, name = path.read_bytes(), path.name
        doc_type = formats.detect_type(name)

        def full():
            return parse_document(kb="bench", namespace="ns", filename=name, data=data, tokenizer_model=MODEL)

        full()
        bare_partition(name, data)
        parse_times, result = timed(full, args.repeat)
        bare_times, _ = timed(lambda: bare_partition(name, data), args.repeat)
        row = rows.setdefault(doc_type, {"files": 0, "pages": 0, "chunks": 0, "times": [], "bare": []})
        row["files"] += 1
        row["pages"] += max(result.page_count, 1)
        row["chunks"] += len(result.chunks) + sum(len(a.chunks) for a in result.attachments)
        row["times"].append(statistics.median(parse_times))
        row["bare"].append(statistics.median(bare_times))
    print(f"{'format':9} {'files':>5} {'pages':>5} {'chunks':>6} {'median s':>9} {'p95 s':>7} "
          f"{'pages/s':>8} {'chunks/s':>9} {'vs bare':>8}")
    for doc_type, row in sorted(rows.items()):
        times = sorted(row["times"])
        total, bare = sum(times), sum(row["bare"])
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        print(f"{doc_type:9} {row['files']:5d} {row['pages']:5d} {row['chunks']:6d} {statistics.median(times):9.3f} "
              f"{p95:7.3f} {row['pages'] / total:8.1f} {row['chunks'] / total:9.1f} {total / bare:8.2f}")


if __name__ == "__main__":
    main()
