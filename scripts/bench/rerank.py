"""Cross-encoder reranking throughput (pairs/s) through the real FlagReranker path.

    python scripts/bench/rerank.py                      # tiny random BERT built here (no weights needed)
    python scripts/bench/rerank.py --model /models/bge-reranker-base --max-length 512
    python scripts/bench/rerank.py --model BAAI/bge-reranker-v2-m3   # if already in the Hugging Face cache

With real weights: download them once where a network is allowed
(`huggingface-cli download BAAI/bge-reranker-base --local-dir /models/bge-reranker-base`),
then pass the directory (or the hub name, which is looked up in the local cache
only). Pairs are (SciFact claim, SciFact abstract) from ../shared/data/scifact,
or the bundled samples when SciFact is missing. Each batch size is timed over
`--rounds` rounds of `--pairs` pairs; the baseline is batch size 1 in the same
process, so the ratios show what batching buys on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shared.cross_encoder import CrossEncoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "scifact"


def load_pairs(data: Path, count: int) -> list[tuple[str, str]]:
    if (data / "corpus.jsonl").is_file():
        with open(data / "queries.jsonl", encoding="utf-8") as handle:
            queries = [json.loads(line)["text"] for line, _ in zip(handle, range(count))]
        with open(data / "corpus.jsonl", encoding="utf-8") as handle:
            docs = [(lambda d: f"{d.get('title', '')}\n{d.get('text', '')}")(json.loads(line))
                    for line, _ in zip(handle, range(count))]
        return list(zip(queries, docs))
    print(f"SciFact not found at {data}; using the bundled samples", file=sys.stderr)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted((ROOT / "samples").rglob("*.md"))]
    paragraphs = [p for t in texts for p in t.split("\n\n") if len(p) > 80]
    return [("How long does charging take?", paragraphs[i % len(paragraphs)]) for i in range(count)]


def time_batches(encoder: CrossEncoder, pairs: list[tuple[str, str]], batch_size: int, rounds: int):
    encoder._model.batch_size = batch_size  # FlagReranker reads its batch size per call
    per_round = []
    for _ in range(rounds):
        started = time.perf_counter()
        for query in dict.fromkeys(q for q, _ in pairs):
            encoder.score(query, [p for q, p in pairs if q == query])
        per_round.append(time.perf_counter() - started)
    return per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="bge reranker directory or cached hub name; empty = tiny model")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-sizes", default="1,8,16,32")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on 2 shared cores)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if not model:
            from tests.tiny_cross_encoder import build_tiny_cross_encoder

            model = str(build_tiny_cross_encoder(Path(tmp) / "tiny"))
            print("model: tiny random BERT (2 layers, hidden 32, MiniLM vocabulary) built for this run")
        else:
            print(f"model: {model}")
        encoder = CrossEncoder(model, device="cpu", max_length=args.max_length)
        pairs = load_pairs(args.data, args.pairs)
        # one query per group of 8 passages, like a reranker call over a candidate list
        pairs = [(pairs[i - i % 8][0], passage) for i, (_, passage) in enumerate(pairs)]
        encoder.score(pairs[0][0], [pairs[0][1]])  # warm-up
        print(f"pairs per round: {len(pairs)}, rounds: {args.rounds}, max_length: {args.max_length}, "
              f"torch threads: {args.threads}")
        print(f"{'batch':>5}  {'median s':>9}  {'p95 s':>8}  {'pairs/s':>9}  {'vs batch 1':>10}")
        baseline = None
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            rounds = time_batches(encoder, pairs, batch_size, args.rounds)
            median = statistics.median(rounds)
            rate = len(pairs) / median
            baseline = baseline or rate
            print(f"{batch_size:5d}  {median:9.4f}  {float(np.percentile(rounds, 95)):8.4f}  {rate:9.1f}  "
                  f"{rate / baseline:9.2f}x")


if __name__ == "__main__":
    main()
