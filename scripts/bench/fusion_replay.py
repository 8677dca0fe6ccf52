"""Re-fuse recorded route lists offline: nDCG@10 of every fusion setting on every set and part, in seconds.

Record once (the slow part: indexing, embedding, one search per query and route):

    ragkb eval --dataset ../shared/data/scifact --split test --tune-split train --runs /tmp/scifact.runs.jsonl.gz
    python scripts/bench/retrieval_samples.py --runs /tmp/samples.runs.jsonl.gz

then compare fusion settings with the retriever's own fusion code (`ragkb.tune.fuse_run`: the
competence the retriever measured for each query scales the weights, as it does online):

    python scripts/bench/fusion_replay.py /tmp/scifact.runs.jsonl.gz /tmp/samples.runs.jsonl.gz [--depth 40]

Columns are `<set>:<part>` in the order the files name them; `bm25` and `dense` are the routes alone,
`default` is the shipped `RetrieverConfig()` (fusion, bm25/dense weight). `--depth N` cuts every route list to its first N
entries first (the online default searches 40 deep, `ragkb eval` 100).
"""

import _setup  # noqa: F401  (thread environment and sys.path first)

import argparse
from pathlib import Path

import numpy as np

from ragkb.tune import DENSE_SHARES, SPECS, QueryRun, load_runs, mean_ndcg, ndcg10, share_weights
from services.retriever.retriever import base_weights, fusion_spec
from shared.config import RetrieverConfig


def route_score(runs: list[QueryRun], route: str) -> float:
    return float(np.mean([ndcg10(run.units(c for c, _ in run.routes.get(route, [])), run.judged) for run in runs]))


def cut(run: QueryRun, depth: int) -> QueryRun:
    if depth <= 0:
        return run
    return QueryRun(**(vars(run) | {"routes": {r: ranked[:depth] for r, ranked in run.routes.items()}}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="files written by `ragkb eval --runs` or retrieval_samples.py --runs")
    parser.add_argument("--depth", type=int, default=0, help="cut each route list to N entries first (0: as recorded)")
    parser.add_argument("--shares", action="store_true", help="every dense share of the tuning grid, not only 0.5")
    args = parser.parse_args()
    columns: dict[str, list[QueryRun]] = {}
    for path in map(Path, args.runs):
        name = path.name.split(".")[0]
        for part, runs in load_runs(path).items():
            columns[f"{name}:{part}"] = [cut(run, args.depth) for run in runs]
    default = RetrieverConfig()
    rows = {"bm25": lambda runs: route_score(runs, "bm25"), "dense": lambda runs: route_score(runs, "dense"),
            f"default {fusion_spec(default).describe()} {default.bm25_weight}/{default.dense_weight}": lambda runs: mean_ndcg(runs, fusion_spec(default),
                                                                                 base_weights(default))}
    for spec in SPECS:
        for share in DENSE_SHARES if args.shares else (0.5,):
            rows[f"{spec.describe()} dense {share}"] = (
                lambda runs, spec=spec, share=share: mean_ndcg(runs, spec, share_weights(share)))
    width = max(len(name) for name in rows)
    print(f"{'':<{width}} " + " ".join(f"{column:>16}" for column in columns))
    print(f"{'queries':<{width}} " + " ".join(f"{len(runs):>16}" for runs in columns.values()))
    for name, score in rows.items():
        print(f"{name:<{width}} " + " ".join(f"{score(runs):>16.4f}" for runs in columns.values()))


if __name__ == "__main__":
    main()
