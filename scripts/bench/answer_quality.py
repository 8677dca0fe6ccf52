"""Answer quality on the development sets, and the shipped answerability defaults fitted on their tune parts.

    python scripts/bench/answer_sets.py            # once: builds the sets from ../shared/data
    python scripts/bench/answer_quality.py [--sets squad2,scifact,cmrc2018,samples] [--fresh]

1. Every question of every set runs through the product's pipeline (`ragkb.eval_answers`), with
   an answerability gate that lets everything through, so each question's answer, citations and
   evidence signals are recorded (cached in <dir>/<set>/outcomes.json; --fresh re-runs).
2. One logistic model per language is fitted on the pooled *tune* parts (`answerability.fit`,
   threshold at --target-answer-rate of the answerable tune questions): these are the
   defaults in services/generator/answerability.py.
3. The decisions of those models (plus the coverage floor, `min_evidence_score`) are replayed
   on the recorded signals, and the metrics of `ragkb eval-answers` are printed per set, for
   the tune part and the unseen part. The replay is exact: with the extractive generator the
   answer does not depend on the gate, only whether it is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import _setup  # noqa: F401  (threads, offline hub, repository on sys.path)

from ragkb import eval_answers  # noqa: E402
from services.generator.answerability import fit, probability  # noqa: E402
from services.generator.evidence import SIGNALS  # noqa: E402
from shared.config import AnswerabilityModel, GeneratorConfig, KBConfig  # noqa: E402
from shared.kb import KnowledgeBaseCatalog  # noqa: E402

DEFAULT_DIR = Path.home() / ".cache" / "ragkb" / "answer-sets"
OPEN_GATE = AnswerabilityModel(features=SIGNALS, weights=(0.0,) * len(SIGNALS), bias=0.0, threshold=0.0)


def collect(folder: Path, name: str, fresh: bool, limit: int) -> list[eval_answers.Outcome]:
    cache = folder / name / "outcomes.json"
    if cache.is_file() and not fresh:
        return [eval_answers.Outcome(**record) for record in json.loads(cache.read_text())]
    home = Path(os.environ.get("RAGKB_DATA_DIR") or folder / "home")
    catalog = KnowledgeBaseCatalog(home)
    config = KBConfig(name="collect", generator=GeneratorConfig(
        min_evidence_score=0.0, answerability={"en": OPEN_GATE, "zh": OPEN_GATE}))
    if not catalog.exists("collect"):
        catalog.create("collect")
    catalog.replace(config)
    os.environ["RAGKB_DATA_DIR"] = str(home)
    outcomes = eval_answers.run("collect", folder / name / "questions.jsonl", folder / name / "corpus.jsonl",
                                limit=limit)
    cache.write_text(json.dumps(eval_answers.outcomes_json(outcomes)))
    return outcomes


def replay(outcomes: list[eval_answers.Outcome], models: dict[str, AnswerabilityModel],
           floor: float) -> list[eval_answers.Outcome]:
    replayed = []
    for outcome in outcomes:
        model = models.get(outcome.language) or models["en"]
        score = probability(model, outcome.signals)
        refuse = outcome.refused or score < model.threshold or outcome.signals.get("coverage", 0.0) < floor
        replayed.append(dataclasses.replace(outcome, refused=refuse, evidence_score=0.0 if outcome.refused
                                            else score))
    return replayed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--sets", default="squad2,scifact,cmrc2018,samples")
    parser.add_argument("--target-answer-rate", type=float, default=0.9)
    parser.add_argument("--limit", type=int, default=0, help="the first N questions of each set")
    parser.add_argument("--fresh", action="store_true", help="re-run the pipeline instead of the cached outcomes")
    args = parser.parse_args()
    names = [n for n in args.sets.split(",") if n]
    missing = [n for n in names if not (args.dir / n / "questions.jsonl").is_file()]
    if missing:
        raise SystemExit(f"no question set {', '.join(missing)} under {args.dir}: run scripts/bench/answer_sets.py")
    recorded = {name: collect(args.dir, name, args.fresh, args.limit) for name in names}
    pooled = [o for outcomes in recorded.values() for o in outcomes if o.part == "tune"]
    models = {}
    for language in sorted({o.language for o in pooled}):
        rows = [o for o in pooled if o.language == language]
        models[language] = fit([o.signals for o in rows], [o.answerable for o in rows],
                               target_answer_rate=args.target_answer_rate)
    floor = GeneratorConfig().min_evidence_score
    print("fitted on the tune parts (paste into DEFAULT_MODELS):")
    for language, model in models.items():
        print(f'    "{language}": AnswerabilityModel(features=SIGNALS, weights={model.weights}, '
              f'bias={model.bias}, threshold={model.threshold}),')
    for name, outcomes in recorded.items():
        print(f"\n== {name} (coverage floor {floor:g})")
        print(eval_answers.format_report(eval_answers.report(replay(outcomes, models, floor))))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
