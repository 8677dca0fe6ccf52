"""Ingestion throughput of the whole pipeline against the bare embedding model.

What it measures
  1. Pipeline: the first N SciFact corpus documents, each written as a .txt file (title,
     blank line, abstract), are uploaded over REST to a fresh knowledge base of an
     embedded stack (every service in this process, temp data dir, ephemeral ports).
     Wall time runs from the first upload until every job is seen final; from it come
     documents/s and chunks/s (sum of `chunks_total` of the jobs that ended `done`),
     plus p50/p95 per-job latency (job created_at -> updated_at, which includes queue
     wait behind earlier uploads).
  2. Baseline, same process: bare `SentenceTransformer.encode` of the same model on the
     exact chunk texts the pipeline indexed (re-chunked with the parser's domain function
     and the KB's chunker config), same batch size, normalize_embeddings=True. It runs
     once before and once after the pipeline, and the pipeline is compared with the mean
     of the two rates, so a load change on a shared machine during the run shows as a
     spread between them instead of moving the ratio unseen.
  The ratio pipeline chunks/s / encode chunks/s is the share of the model's raw speed the
  pipeline delivers (1.0 = no overhead). The indexer also embeds each chunk's scored sentences
  (shared/sentence_vectors.py), in the same call as the chunks: what that costs the bare model
  is measured beside it, before and after the pipeline too (one `encode` over the chunks and
  their sentences, as the indexer calls it; and, once, the sentences alone as a second call),
  and the pipeline is also compared with the chunks+sentences encode. Beside it, the same ratio in CPU seconds (this
  process, its parse workers and the Milvus Lite server; the bare encode runs in this
  process alone): chunks per CPU second of the pipeline over those of the bare encode,
  which other processes' load moves far less than wall time.

Run from the repository root (the SciFact data lives in ../shared/data/scifact):
    python scripts/bench/ingest.py --docs 200
    python scripts/bench/ingest.py --docs 50 --batch-size 16 --data /path/to/scifact
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import sys
import time
from pathlib import Path

import httpx

import _common as common
from services.parser.parser import parse_document
from shared.config import DEFAULT_NAMESPACE, KBConfig
from shared.embedders import resolve_model_dir
from shared.sentences import scored_sentences

KB = "bench"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=200, help="first N corpus documents (default 200)")
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA,
                        help=f"SciFact folder in BEIR layout (default {common.DEFAULT_DATA})")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="embedder batch size, for the KB and the bare-encode baseline (default 32)")
    return parser.parse_args()


def indexed_chunks(kb: KBConfig, files: list[tuple[str, Path]]) -> tuple[list[str], list[str]]:
    """(the chunk contents, their scored sentences) the indexer embedded: the parser's domain function, same
    chunker config."""
    texts, sentences = [], []
    for doc_id, path in files:
        result = parse_document(kb=kb.name, namespace=DEFAULT_NAMESPACE, filename=path.name,
                                data=path.read_bytes(), doc_id=doc_id, chunker=kb.chunker)
        texts.extend(chunk.content for chunk in result.chunks)
        sentences.extend(s for chunk in result.chunks for s in scored_sentences(chunk))
    return texts, sentences


def bare_model(kb: KBConfig):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(resolve_model_dir(kb.embedder.model)), device=kb.embedder.device,
                               local_files_only=True)


def bare_encode(model, texts: list[str], batch_size: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `encode` call over all texts, after a small untimed warm-up."""
    model.encode(texts[:batch_size], batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    cpu, started = common.process_tree_cpu(), time.perf_counter()
    model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                 show_progress_bar=False)
    return time.perf_counter() - started, common.process_tree_cpu() - cpu


def main() -> None:
    args = parse_args()
    common.require_scifact(args.data)
    docs = common.read_corpus(args.data)[:args.docs]
    config_yaml = f"embedder:\n  batch_size: {args.batch_size}\n"
    kb = KBConfig.from_yaml(config_yaml, name=KB)

    with common.temp_root() as tmp:
        root = Path(tmp)
        files = common.write_documents(docs, root / "files")
        print("chunking the documents for the baseline ...", file=sys.stderr)
        all_texts, all_sentences = indexed_chunks(kb, files)
        model = bare_model(kb)
        print(f"bare encode of {len(all_texts)} chunks (before the pipeline) ...", file=sys.stderr)
        before_s, before_cpu = bare_encode(model, all_texts, args.batch_size)
        before_cps, before_cpu_cps = len(all_texts) / before_s, len(all_texts) / before_cpu
        print(f"bare encode of the chunks and their {len(all_sentences)} sentences, one call ...", file=sys.stderr)
        both_before_s, _ = bare_encode(model, all_texts + all_sentences, args.batch_size)
        print("bare encode of the sentences alone ...", file=sys.stderr)
        sentences_s, _ = bare_encode(model, all_sentences, args.batch_size)
        stack = common.start_stack(root)
        try:
            with httpx.Client(base_url=stack.http_url, timeout=120) as client:
                common.create_kb(client, KB, config_yaml)
                cpu = common.process_tree_cpu()
                jobs, wall = common.ingest(client, KB, files)
                pipeline_cpu = common.process_tree_cpu() - cpu
            common.report_failures(jobs)
            done = [job for job in jobs if job["state"] == "done"]
            chunks = sum(int(job["chunks_total"]) for job in done)
            done_ids = {job["doc_id"] for job in done}
            texts, sentences = indexed_chunks(kb, [(d, p) for d, p in files if d in done_ids])
            if len(texts) != chunks:
                print(f"warning: re-chunking gave {len(texts)} chunks, the jobs reported {chunks}", file=sys.stderr)
        finally:
            stack.stop()
        print(f"bare encode of {len(texts)} chunks (after the pipeline) ...", file=sys.stderr)
        after_s, after_cpu = bare_encode(model, texts, args.batch_size)
        after_cps, after_cpu_cps = len(texts) / after_s, len(texts) / after_cpu
        print("bare encode of the chunks and their sentences, one call (after the pipeline) ...", file=sys.stderr)
        both_after_s, _ = bare_encode(model, texts + sentences, args.batch_size)
        both_cps = (len(all_texts) / both_before_s + len(texts) / both_after_s) / 2

    latency_p50, latency_p95 = common.p50_p95([common.job_seconds(job) for job in done])
    pipeline_cps = chunks / wall
    encode_cps = (before_cps + after_cps) / 2
    encode_cpu_cps = (before_cpu_cps + after_cpu_cps) / 2
    print()
    print(f"model {kb.embedder.model}, batch {args.batch_size}; {common.machine_line()}")
    common.print_table("ingest benchmark (SciFact corpus, .txt over REST)", [
        ("docs (done / uploaded)", f"{len(done)} / {len(jobs)}"),
        ("chunks", f"{chunks}"),
        ("pipeline seconds", f"{wall:.2f}"),
        ("pipeline docs/s", f"{len(done) / wall:.2f}"),
        ("pipeline chunks/s", f"{pipeline_cps:.2f}"),
        ("encode chunks/s before / after", f"{before_cps:.2f} / {after_cps:.2f}"),
        ("encode chunks/s (mean)", f"{encode_cps:.2f}"),
        ("ratio pipeline/encode", f"{pipeline_cps / encode_cps:.3f}"),
        ("scored sentences (of the chunks)", f"{len(sentences)}"),
        ("encode chunks+sentences, one call: chunks/s before / after",
         f"{len(all_texts) / both_before_s:.2f} / {len(texts) / both_after_s:.2f}"),
        ("  its time / the chunks' alone (before)", f"{both_before_s / before_s:.2f}"),
        ("  sentences as a second call: its time / the chunks' (before)", f"{sentences_s / before_s:.2f}"),
        ("ratio pipeline/encode chunks+sentences", f"{pipeline_cps / both_cps:.3f}"),
        ("pipeline CPU seconds", f"{pipeline_cpu:.2f}"),
        ("pipeline chunks/CPU s", f"{chunks / pipeline_cpu:.2f}"),
        ("encode chunks/CPU s (mean)", f"{encode_cpu_cps:.2f}"),
        ("CPU ratio pipeline/encode", f"{chunks / pipeline_cpu / encode_cpu_cps:.3f}"),
        ("job latency p50 s", f"{latency_p50:.2f}"),
        ("job latency p95 s", f"{latency_p95:.2f}"),
    ])


if __name__ == "__main__":
    main()
