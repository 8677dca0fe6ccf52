"""Calibrate the refusal threshold (`GeneratorConfig.min_evidence_score`) on the bundled samples and SciFact.

    python scripts/bench/refusal.py [--data ../shared/data/scifact] [--distractors 1500]

Evidence is what the generator computes: the share of the question's content
terms covered by the best of the top sources. Sources come from the real BM25
keyword store (SQLite FTS5), top 5, as the reranker would pass them on.

- samples: answerable questions about the bundled English and Chinese documents
  against off-topic questions (en + zh) over the same index;
- SciFact test claims: answerable = the claim's evidence abstract is indexed
  (with distractor abstracts); unanswerable = the same claim over an index of
  only the distractors.

Prints the score distributions and, per threshold, the share of answerable
questions answered and unanswerable ones refused. Two suggestions: the threshold
with the best mean of the two (balanced accuracy), and the recall-first one — the
highest threshold that still answers at least `--min-answered` of the answerable
questions. The default uses the recall-first rule: a wrong refusal hides
knowledge the KB has, while a weak answer is still bounded by the prompt's
"say so when the sources do not answer" and by the claim-level citation check.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from services.generator.evidence import evidence_score  # noqa: E402
from services.parser.parser import parse_document  # noqa: E402
from shared.contracts import chunk_pb2  # noqa: E402
from shared.stores.sqlite_fts import SqliteFtsKeywordStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "scifact"
TOP = 5
FILTER = chunk_pb2.SearchFilter(namespaces=["default"])

SAMPLE_ANSWERABLE = [
    "How long does it take to charge the AMR-7?", "What is the maximum payload of the AMR-7?",
    "What is the top speed of the robot?", "How do I add a new robot to my fleet?",
    "How long does Beacon keep telemetry data?", "What are the rate limits of the Beacon API?",
    "Does Beacon support single sign-on?", "What does error code E101 mean?",
    "How do I set a no-go zone?", "What battery does the AMR-7 use?",
    "AMR-7 的最大载重是多少？", "AMR-7 充电需要多长时间？", "如何设置禁行区？", "Beacon 的遥测数据保存多久？",
    "AMR-7 使用什么电池？", "急停按钮在哪里？",
]
SAMPLE_UNANSWERABLE = [
    "What is the capital of France?", "How do I bake sourdough bread?", "Who won the 2018 football world cup?",
    "What is the boiling point of ethanol?", "How many moons does Jupiter have?",
    "What is the best recipe for lasagna?", "How do I renew my passport?", "What is the price of bitcoin today?",
    "法国的首都是哪里？", "如何烤制酸面包？", "木星有多少颗卫星？", "明天北京的天气怎么样？",
    "怎样申请护照？", "莎士比亚写了哪些剧本？",
]


def sample_store(folder: Path) -> SqliteFtsKeywordStore:
    store = SqliteFtsKeywordStore(folder / "samples.sqlite")
    for path in sorted((ROOT / "samples").rglob("*")):
        if path.is_file() and path.name != "README.md":
            store.upsert(parse_document(kb="cal", namespace="default", filename=path.name,
                                        data=path.read_bytes()).chunks)
    return store


def scifact_stores(data: Path, folder: Path, distractors: int, seed: int):
    corpus = {}
    with open(data / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            corpus[doc["_id"]] = doc
    queries = {}
    with open(data / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            query = json.loads(line)
            queries[query["_id"]] = query["text"]
    relevant: dict[str, set[str]] = {}
    for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc_id, _ = line.split("\t")
        relevant.setdefault(qid, set()).add(doc_id)
    gold = set().union(*relevant.values())
    pool = sorted(set(corpus) - gold)
    random.Random(seed).shuffle(pool)
    with_gold = SqliteFtsKeywordStore(folder / "with-gold.sqlite")
    without_gold = SqliteFtsKeywordStore(folder / "without-gold.sqlite")
    for doc_id in [*gold, *pool[:distractors]]:
        doc = corpus[doc_id]
        chunk = chunk_pb2.KnowledgeChunk(chunk_id=doc_id, doc_id=doc_id, namespace="default",
                                         heading_path=[doc.get("title", "")], raw_content=doc.get("text", ""),
                                         content=f"{doc.get('title', '')}\n{doc.get('text', '')}")
        with_gold.upsert([chunk])
        if doc_id not in gold:
            without_gold.upsert([chunk])
    return [queries[q] for q in relevant if q in queries], with_gold, without_gold


def scores(store: SqliteFtsKeywordStore, questions: list[str]) -> np.ndarray:
    return np.array([evidence_score(q, store.search(q, FILTER, TOP)) for q in questions])


def describe(name: str, values: np.ndarray) -> None:
    print(f"{name:32s} n={len(values):4d} min={values.min():.2f} p10={np.percentile(values, 10):.2f} "
          f"median={np.median(values):.2f} p90={np.percentile(values, 90):.2f} max={values.max():.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--distractors", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--min-answered", type=float, default=0.9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        samples = sample_store(folder)
        sets = {"samples answerable": (scores(samples, SAMPLE_ANSWERABLE), True),
                "samples unanswerable": (scores(samples, SAMPLE_UNANSWERABLE), False)}
        if (args.data / "corpus.jsonl").is_file():
            questions, with_gold, without_gold = scifact_stores(args.data, folder, args.distractors, args.seed)
            sets["scifact answerable"] = (scores(with_gold, questions), True)
            sets["scifact unanswerable"] = (scores(without_gold, questions), False)
        else:
            print(f"SciFact not found at {args.data}; calibrating on the samples only", file=sys.stderr)
    for name, (values, _) in sets.items():
        describe(name, values)
    answerable = np.concatenate([v for v, a in sets.values() if a])
    unanswerable = np.concatenate([v for v, a in sets.values() if not a])
    print("\nthreshold  answered(answerable)  refused(unanswerable)  balanced  "
          "samples answered/refused")
    best = (0.0, -1.0)
    recall_first = 0.0
    for threshold in np.round(np.arange(0.0, 1.0001, 0.05), 2):
        answered = float(np.mean(answerable >= threshold))
        refused = float(np.mean(unanswerable < threshold))
        balanced = (answered + refused) / 2
        s_ans = float(np.mean(sets["samples answerable"][0] >= threshold))
        s_ref = float(np.mean(sets["samples unanswerable"][0] < threshold))
        print(f"{threshold:9.2f}  {answered:20.3f}  {refused:21.3f}  {balanced:8.3f}  {s_ans:.2f}/{s_ref:.2f}")
        if balanced > best[1] + 1e-9:
            best = (threshold, balanced)
        if answered >= args.min_answered:
            recall_first = threshold
    print(f"\nbest balanced accuracy: threshold {best[0]:.2f} ({best[1]:.3f})")
    print(f"recall-first (answers >= {args.min_answered:.0%} of answerable): min_evidence_score = {recall_first:.2f}")


if __name__ == "__main__":
    main()
