"""Compare two `query.py --save` files answer by answer.

For each query (matched by text) it compares what an answer says: the answer text, citations,
citation issues (a flagged or dropped claim is one), refusal, the answerability decision, its
reason, evidence score and signals, and the chunks it was written from. Scores are compared exactly and, with --tolerance,
again allowing that much difference (vectors rounded differently move the 4th decimal). It prints
how many queries differ in each part and, for the first --show of them, what differs.

    python scripts/bench/compare_answers.py before.jsonl after.jsonl
    python scripts/bench/compare_answers.py before.jsonl after.jsonl --tolerance 0.0002 --show 5
"""

import argparse
import json
from collections import Counter
from pathlib import Path

PARTS = ("answer", "citations", "citation_issues", "refused", "decision", "reason", "evidence_score", "signals",
         "chunk_ids")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.0, help="allowed difference of any score")
    parser.add_argument("--show", type=int, default=3, help="print the differences of this many queries")
    return parser.parse_args()


def read(path: Path) -> dict[str, dict]:
    with open(path, encoding="utf-8") as handle:
        return {row["query"]: row["response"] for row in map(json.loads, handle) if row}


def parts(response: dict) -> dict:
    answerability = response.get("answerability") or {}
    return {
        "answer": response.get("answer", ""), "citations": response.get("citations", []),
        "citation_issues": response.get("citation_issues", []), "refused": response.get("refused", False),
        "decision": answerability.get("decision", ""), "evidence_score": answerability.get("evidence_score", 0.0),
        "reason": answerability.get("reason", ""), "signals": answerability.get("signals", {}),
        "chunk_ids": [c["chunk"]["chunk_id"] for c in response.get("chunks", [])],
    }


def same(a, b, tolerance: float) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= tolerance
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tolerance) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, tolerance) for x, y in zip(a, b))
    return a == b


def main() -> None:
    args = parse_args()
    before, after = read(args.before), read(args.after)
    common = [q for q in before if q in after]
    exact, tolerant, shown = Counter(), Counter(), 0
    for query in common:
        old, new = parts(before[query]), parts(after[query])
        differing = [p for p in PARTS if not same(old[p], new[p], 0.0)]
        for part in differing:
            exact[part] += 1
            tolerant[part] += not same(old[part], new[part], args.tolerance)
        if differing and shown < args.show:
            shown += 1
            print(f"--- {query}")
            for part in differing:
                print(f"  {part}:\n    before {json.dumps(old[part], ensure_ascii=False)[:400]}\n"
                      f"    after  {json.dumps(new[part], ensure_ascii=False)[:400]}")
    print(f"\n{len(common)} queries in both files ({len(before)} before, {len(after)} after)")
    for part in PARTS:
        print(f"  {part:16} differs in {exact[part]:3} queries exactly, {tolerant[part]:3} beyond "
              f"{args.tolerance:g}")


if __name__ == "__main__":
    main()
