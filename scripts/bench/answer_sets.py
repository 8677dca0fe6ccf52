"""Build the development question sets for `ragkb eval-answers` / `ragkb calibrate` from ../shared/data.

    python scripts/bench/answer_sets.py [--data ../shared/data] [--out ~/.cache/ragkb/answer-sets]

Writes <out>/<set>/corpus.jsonl and <out>/<set>/questions.jsonl for:

- squad2: the SQuAD 2.0 subset as it is (every paragraph indexed; unanswerable questions were
  written against indexed paragraphs: the hard case), a deterministic sample of each kind;
- scifact: test claims over their evidence abstracts plus distractors; for half of the claims
  (by a hash of the id) the evidence abstracts are left out of the corpus, which makes them
  unanswerable by construction;
- cmrc2018: Chinese dev questions over their paragraphs plus other paragraphs of the set; half of
  the asked paragraphs (by hash) are left out, and their questions become unanswerable;
- squad2-siblings and cmrc2018-siblings: each paragraph cut into passages of a few sentences,
  every passage indexed (all 1,104 CMRC2018 paragraphs); for half of the passages that hold an
  asked answer (by hash) that passage is left out while the other passages of its paragraph stay,
  so the question's topic is in the index and its answer is not (a question whose answer is
  still in a kept passage of its paragraph stays answerable);
- samples: questions on the bundled samples/ (English and Chinese), answerable ones with their
  document and answer, and unanswerable ones: off-topic, and on-topic asking what the samples
  never say.

Which half of a set is tuned on and which stays unseen is decided by `eval_answers.Question.part`
(a hash of the question's group, its paragraph where it has one, else of its id), not here: the
questions on one paragraph are all tuned on or all unseen, in every set that asks them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
DEFAULT_OUT = Path.home() / ".cache" / "ragkb" / "answer-sets"

SAMPLE_ANSWERABLE = [
    ("How long does it take to charge the AMR-7 from 20% to 80%?", "en/amr7-user-guide.md", ["45 minutes"]),
    ("What is the maximum payload of the AMR-7?", "en/amr7-user-guide.md", ["300 kg"]),
    ("What is the top speed of the AMR-7?", "en/amr7-user-guide.md", ["1.8 m/s"]),
    ("What kind of battery does the AMR-7 use?", "en/amr7-user-guide.md", ["lithium iron phosphate"]),
    ("How long does Beacon keep telemetry data?", "en/beacon-admin-faq.txt", ["30 days"]),
    ("Does Beacon support single sign-on?", "en/beacon-admin-faq.txt", ["SAML 2.0"]),
    ("AMR-7 的最大载重是多少？", "zh/amr7-使用手册.md", ["300公斤"]),
    ("AMR-7 充电从20%到80%需要多长时间？", "zh/amr7-使用手册.md", ["45分钟"]),
    ("AMR-7 使用什么电池？", "zh/amr7-使用手册.md", ["磷酸铁锂"]),
    ("Beacon 的遥测数据保存多久？", "zh/beacon-常见问题.txt", ["30天"]),
]
SAMPLE_UNANSWERABLE = [
    "What is the capital of France?", "How do I bake sourdough bread?", "How many moons does Jupiter have?",
    "What colour options are available for the AMR-7 chassis?", "Who is the chief executive of the AMR-7 maker?",
    "How much does an AMR-7 cost?", "Can the AMR-7 climb stairs between floors?",
    "法国的首都是哪里？", "木星有多少颗卫星？", "AMR-7 的售价是多少？", "AMR-7 有哪些外壳颜色可选？",
    "AMR-7 的制造商总部在哪个城市？",
]


def bucket(key: str, buckets: int = 2) -> int:
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % buckets


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_qrels(path: Path) -> dict[str, set[str]]:
    relevant: dict[str, set[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] != "query-id" and int(parts[2]) > 0:
            relevant.setdefault(parts[0], set()).add(parts[1])
    return relevant


def write(out: Path, name: str, corpus: list[dict], questions: list[dict]) -> None:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    # hash order mixes both kinds, so the first N questions (`--limit N`) are a fair sample
    questions = sorted(questions, key=lambda q: hashlib.sha1(q["id"].encode()).hexdigest())
    for file, records in (("corpus.jsonl", corpus), ("questions.jsonl", questions)):
        with open(folder / file, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    answerable = sum(q["answerable"] for q in questions)
    print(f"{name}: {len(corpus)} documents, {answerable} answerable + {len(questions) - answerable} "
          f"unanswerable questions -> {folder}")


def question(qid: str, text: str, answerable: bool, gold: list[str], answers: list[str], language: str,
             group: str = "") -> dict:
    record = {"id": qid, "question": text, "answerable": answerable, "gold_doc_ids": gold if answerable else [],
              "gold_answers": answers if answerable else [], "language": language}
    return record | ({"group": group} if group else {})


def squad2(data: Path, per_kind: int) -> tuple[list[dict], list[dict]]:
    corpus = [{"_id": r["_id"], "title": r["title"], "text": r["text"]}
              for r in read_jsonl(data / "squad2_subset" / "corpus.jsonl")]
    records = sorted(read_jsonl(data / "squad2_subset" / "questions.jsonl"),
                     key=lambda r: hashlib.sha1(r["id"].encode()).hexdigest())
    chosen = [r for r in records if r["answerable"]][:per_kind] + [r for r in records if not r["answerable"]][:per_kind]
    return corpus, [question(r["id"], r["question"], r["answerable"], r["gold_passage_ids"], r["answers"], "en",
                             r["context_passage_id"]) for r in chosen]


def scifact(data: Path, claims: int, distractors: int) -> tuple[list[dict], list[dict]]:
    documents = {r["_id"]: r for r in read_jsonl(data / "scifact" / "corpus.jsonl")}
    texts = {r["_id"]: r["text"] for r in read_jsonl(data / "scifact" / "queries.jsonl")}
    relevant = {q: d for q, d in read_qrels(data / "scifact" / "qrels" / "test.tsv").items() if q in texts}
    chosen = sorted(relevant, key=lambda q: hashlib.sha1(q.encode()).hexdigest())[:claims]
    removed = {q for q in chosen if bucket("scifact-removed:" + q)}
    removed_docs = set().union(*(relevant[q] for q in removed)) if removed else set()
    kept = [q for q in chosen if q not in removed and not relevant[q] & removed_docs]
    gold = set().union(*(relevant[q] for q in kept))
    pool = sorted(set(documents) - gold - removed_docs)
    random.Random(13).shuffle(pool)
    corpus = [{"_id": d, "title": documents[d].get("title", ""), "text": documents[d]["text"]}
              for d in sorted(gold) + pool[:distractors]]
    questions = [question("scifact-" + q, texts[q], True, sorted(relevant[q]), [], "en") for q in kept]
    questions += [question("scifact-" + q, texts[q], False, [], [], "en") for q in sorted(removed)]
    return corpus, questions


def cmrc2018(data: Path, limit: int, distractors: int) -> tuple[list[dict], list[dict]]:
    folder = data / "cmrc2018_beir"
    paragraphs = {r["_id"]: r for r in read_jsonl(folder / "corpus.jsonl")}
    queries = {r["_id"]: r for r in read_jsonl(folder / "queries.jsonl")}
    relevant = {q: d for q, d in read_qrels(folder / "qrels" / "dev.tsv").items() if q in queries}
    chosen = sorted(relevant, key=lambda q: hashlib.sha1(q.encode()).hexdigest())[:limit]
    asked = {d for q in chosen for d in relevant[q]}
    removed_paragraphs = {d for d in asked if bucket("cmrc-removed:" + d)}
    others = sorted(set(paragraphs) - asked)
    random.Random(13).shuffle(others)
    kept = (asked - removed_paragraphs) | set(others[:distractors])
    corpus = [{"_id": d, "title": p.get("title", ""), "text": p["text"]} for d, p in paragraphs.items() if d in kept]
    questions = []
    for q in chosen:
        answerable = not relevant[q] & removed_paragraphs
        questions.append(question("cmrc-" + q, queries[q]["text"], answerable, sorted(relevant[q]),
                                  queries[q].get("metadata", {}).get("answers", []), "zh", min(relevant[q])))
    return corpus, questions


# a sentence ends at 。！？； or at .!? followed by a space and a capital, digit, quote or bracket
_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?])\s+(?=[\"'(A-Z0-9])")


def passages(text: str, max_chars: int) -> list[str]:
    """The paragraph cut between sentences into passages of at most `max_chars` (or one longer sentence)."""
    joiner = "" if re.search(r"[\u4e00-\u9fff]", text) else " "
    cut: list[str] = []
    for sentence in filter(None, (s.strip() for s in _SENTENCE_END.split(text))):
        if cut and len(cut[-1]) + len(joiner) + len(sentence) <= max_chars:
            cut[-1] += joiner + sentence
        else:
            cut.append(sentence)
    return cut


def siblings(prefix: str, paragraphs: dict[str, tuple[str, str]], asked: list[tuple[str, str, str, list[str]]],
             language: str, max_chars: int, per_kind: int) -> tuple[list[dict], list[dict]]:
    """Passages of every paragraph; half of the asked answers' passages left out, their siblings kept.

    `asked`: (question id, question, paragraph id, gold answers), in the order to choose from."""
    cut = {pid: passages(text, max_chars) for pid, (_, text) in paragraphs.items()}
    holding = {qid: [k for k, passage in enumerate(cut[pid]) if any(a and a in passage for a in answers)]
               for qid, _, pid, answers in asked}
    removed = {(pid, k) for qid, _, pid, _ in asked for k in holding[qid] if bucket(f"{prefix}-removed:{pid}#{k}")}
    answerable, unanswerable = [], []
    for qid, text, pid, answers in asked:
        if not holding[qid]:
            continue  # the answer runs across two passages (or is not verbatim in its paragraph)
        kept = [f"{pid}#{k}" for k in holding[qid] if (pid, k) not in removed]
        if not kept and all((pid, k) in removed for k in range(len(cut[pid]))):
            continue  # nothing of its topic is left: not the case this set is for
        kind = answerable if kept else unanswerable
        if len(kind) < per_kind:
            kind.append(question(f"{prefix}-{qid}", text, bool(kept), kept, answers, language, pid))
    corpus = [{"_id": f"{pid}#{k}", "title": paragraphs[pid][0], "text": passage}
              for pid, passages_of in cut.items() for k, passage in enumerate(passages_of) if (pid, k) not in removed]
    return corpus, answerable + unanswerable


def squad2_siblings(data: Path, per_kind: int) -> tuple[list[dict], list[dict]]:
    paragraphs = {r["_id"]: (r["title"], r["text"]) for r in read_jsonl(data / "squad2_subset" / "corpus.jsonl")}
    records = sorted((r for r in read_jsonl(data / "squad2_subset" / "questions.jsonl") if r["answerable"]),
                     key=lambda r: hashlib.sha1(r["id"].encode()).hexdigest())
    asked = [(r["id"], r["question"], r["context_passage_id"], r["answers"]) for r in records]
    return siblings("squad2-siblings", paragraphs, asked, "en", 240, per_kind)


def cmrc2018_siblings(data: Path, per_kind: int) -> tuple[list[dict], list[dict]]:
    folder = data / "cmrc2018_beir"
    paragraphs = {r["_id"]: (r.get("title", ""), r["text"]) for r in read_jsonl(folder / "corpus.jsonl")}
    queries = {r["_id"]: r for r in read_jsonl(folder / "queries.jsonl")}
    relevant = {q: d for q, d in read_qrels(folder / "qrels" / "dev.tsv").items() if q in queries and len(d) == 1}
    chosen = sorted(relevant, key=lambda q: hashlib.sha1(q.encode()).hexdigest())
    asked = [(q, queries[q]["text"], min(relevant[q]), queries[q].get("metadata", {}).get("answers", []))
             for q in chosen]
    return siblings("cmrc-siblings", paragraphs, asked, "zh", 160, per_kind)


def samples() -> tuple[list[dict], list[dict]]:
    folder = ROOT / "samples"
    corpus = [{"_id": str(path.relative_to(folder)), "path": str(path)}
              for path in sorted(folder.rglob("*")) if path.is_file() and path.name != "README.md"]
    known = {entry["_id"] for entry in corpus}
    questions = []
    for number, (text, doc, answers) in enumerate(SAMPLE_ANSWERABLE):
        if doc not in known:
            raise SystemExit(f"samples/{doc} is missing")
        language = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"
        questions.append(question(f"samples-a{number}", text, True, [doc], answers, language))
    for number, text in enumerate(SAMPLE_UNANSWERABLE):
        language = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"
        questions.append(question(f"samples-u{number}", text, False, [], [], language))
    return corpus, questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--squad-per-kind", type=int, default=300, help="answerable and unanswerable questions each")
    parser.add_argument("--scifact-claims", type=int, default=300)
    parser.add_argument("--scifact-distractors", type=int, default=700)
    parser.add_argument("--cmrc-questions", type=int, default=300)
    parser.add_argument("--cmrc-distractors", type=int, default=250)
    args = parser.parse_args()
    if not (args.data / "squad2_subset").is_dir():
        raise SystemExit(f"development data not found under {args.data}")
    write(args.out, "squad2", *squad2(args.data, args.squad_per_kind))
    write(args.out, "scifact", *scifact(args.data, args.scifact_claims, args.scifact_distractors))
    write(args.out, "cmrc2018", *cmrc2018(args.data, args.cmrc_questions, args.cmrc_distractors))
    write(args.out, "squad2-siblings", *squad2_siblings(args.data, args.squad_per_kind))
    write(args.out, "cmrc2018-siblings", *cmrc2018_siblings(args.data, args.cmrc_questions))
    write(args.out, "samples", *samples())


if __name__ == "__main__":
    main()
