"""Retrieval quality on the bundled samples: bm25, dense and hybrid nDCG@10 on their golden questions.

The samples (English + Chinese, samples/en and samples/zh) are ingested over REST into an
embedded stack in a temporary folder, through the real parser, chunker and indexer. The
golden questions (tests/golden/samples.jsonl, each with its document and answer text) run
through the retriever; a chunk is relevant when it belongs to the question's document and
contains its answer. Printed: nDCG@10 per route on all questions with the KB's settings
(defaults, or --kb-config), then `ragkb tune` on the same KB (fitted on its tuning part,
measured on its unseen part; nothing is stored unless the unseen part does not get worse).

    python scripts/bench/retrieval_samples.py
    python scripts/bench/retrieval_samples.py --kb-config my-kb.yaml
    python scripts/bench/retrieval_samples.py --runs /tmp/samples.runs.jsonl   # for fusion_replay.py
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import json
import sys
import tempfile
from pathlib import Path

import _common as common
from ragkb.client import RagkbClient, iter_files
from ragkb.embedded import EmbeddedStack
from ragkb.eval import rows_of
from ragkb.tune import collect_runs, read_questions, save_runs, split_unseen, tune_kb
from services.retriever.retriever import Retriever
from shared.config import Settings
from shared.contracts import chunk_pb2
from shared.kb import KnowledgeBaseCatalog

KB = "samples"
GOLDEN = common.REPO_ROOT / "tests" / "golden" / "samples.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb-config", help="KB YAML (default: the built-in defaults)")
    parser.add_argument("--questions", default=str(GOLDEN))
    parser.add_argument("--runs", help="also write the route lists of every question (parts: tuning, unseen)")
    args = parser.parse_args()
    questions = read_questions(Path(args.questions))
    with tempfile.TemporaryDirectory(prefix="ragkb-samples-") as root:
        # a generous inner deadline: on a busy machine the first KB creation (Milvus Lite start) can be slow
        stack = EmbeddedStack(Settings(data_dir=Path(root) / "data", rpc_timeout_s=300),
                              ephemeral_ports=True).start()
        try:
            client = RagkbClient(f"http://127.0.0.1:{stack.settings.http_port}", timeout_s=600)
            config = Path(args.kb_config).read_text(encoding="utf-8") if args.kb_config else ""
            client.create_kb(KB, config_yaml=config)
            jobs = [client.upload(KB, name, path.read_bytes())["job_id"]
                    for path, name in iter_files(common.REPO_ROOT / "samples") if name != "README.md"]
            failed = [j for j in client.wait(jobs, timeout_s=600) if j["state"] != "done"]
            if failed:
                sys.exit(f"ingestion failed: {[j['error'] for j in failed]}")
            retriever = Retriever(stack.settings)
            kb = KnowledgeBaseCatalog.for_settings(stack.settings).get(KB)
            try:
                runs = collect_runs(retriever, kb, questions, chunk_pb2.SearchFilter(namespaces=["default"]))
            finally:
                retriever.close()
            rows = rows_of(runs)
            if args.runs:
                unseen = {q.qid for q in split_unseen(questions)[1]}
                save_runs(Path(args.runs), {"tuning": [r for r in runs if r.question.qid not in unseen],
                                            "unseen": [r for r in runs if r.question.qid in unseen]})
            print(f"samples, {len(questions)} questions (chunk-level judgements), KB settings:")
            for row, metrics in rows.items():
                print(f"  {row:<7} nDCG@10 {metrics['ndcg@10']:.4f}  R@10 {metrics['recall@10']:.4f}")
            report = tune_kb(stack.settings, KB, Path(args.questions), ["default"])
            print("ragkb tune:", json.dumps(report, indent=2, ensure_ascii=False))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
