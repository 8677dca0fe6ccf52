"""Write the answerable questions of ../shared/data/squad2_subset as a BEIR folder for `ragkb eval`.

Corpus as is; each question's gold passages are its qrels. The questions are split by a hash
of their id: 30% into `test` (kept unseen while choosing fusion defaults), the rest into `train`.

    python scripts/bench/squad2_as_beir.py /tmp/squad2-beir
    ragkb eval --dataset /tmp/squad2-beir --split test --tune-split train
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import _common as common
from ragkb.eval import jsonl_records

UNSEEN_SHARE = 0.3
SOURCE = common.DEFAULT_DATA.parent / "squad2_subset"


def split_of(question_id: str) -> str:
    digest = hashlib.sha256(question_id.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:4], "big") / 2 ** 32 < UNSEEN_SHARE else "train"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="folder to write (corpus.jsonl, queries.jsonl, qrels/train.tsv, qrels/test.tsv)")
    parser.add_argument("--source", default=str(SOURCE))
    args = parser.parse_args()
    source, out = Path(args.source), Path(args.out)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "corpus.jsonl", out / "corpus.jsonl")
    qrels = {"train": ["query-id\tcorpus-id\tscore"], "test": ["query-id\tcorpus-id\tscore"]}
    with (out / "queries.jsonl").open("w", encoding="utf-8") as queries:
        for _line, record in jsonl_records(source / "questions.jsonl"):
            if not record.get("answerable"):
                continue
            queries.write(json.dumps({"_id": record["id"], "text": record["question"]}, ensure_ascii=False) + "\n")
            qrels[split_of(record["id"])] += [f"{record['id']}\t{doc}\t1" for doc in record["gold_passage_ids"]]
    for split, lines in qrels.items():
        (out / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{split}: {len(lines) - 1} judgements")


if __name__ == "__main__":
    main()
