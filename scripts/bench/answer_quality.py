"""Answer quality on the development sets, and the shipped answerability defaults fitted on their tune parts.

    python scripts/bench/answer_sets.py            # once: builds the sets from ../shared/data
    python scripts/bench/answer_quality.py [--sets squad2,squad2-siblings,scifact,cmrc2018,cmrc2018-siblings,samples]
                                           [--fresh]

1. Every question of every set runs through the product's pipeline (`ragkb.eval_answers`), with
   an answerability gate that lets everything through, so each question's answer, citations and
   evidence signals are recorded. The retrieved and reranked sources of each question are kept in
   <dir>/<set>/sources.jsonl: later runs replay only the generator on them (a change to evidence
   selection, the signals or the reader is re-measured without retrieval; latency is then the generator's
   alone); --fresh re-runs retrieval. --limit SET=N,... limits some sets; --recorded fits and reports on
   the outcomes each set's last run wrote, running nothing (so sets can be replayed in separate runs);
   --shipped reports with the shipped defaults instead of the fitted models.
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
import base64
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import _setup  # noqa: F401  (threads, offline hub, repository on sys.path)

from ragkb import eval_answers  # noqa: E402
from services.generator.answerability import DEFAULT_MODELS, fit, probability  # noqa: E402
from services.generator.evidence import SIGNALS  # noqa: E402
from shared.config import AnswerabilityModel, GeneratorConfig, KBConfig  # noqa: E402
from shared.contracts import chunk_pb2, generator_pb2  # noqa: E402
from shared.kb import KnowledgeBaseCatalog  # noqa: E402

DEFAULT_DIR = Path.home() / ".cache" / "ragkb" / "answer-sets"
OPEN_GATE = AnswerabilityModel(features=SIGNALS, weights=(0.0,) * len(SIGNALS), bias=0.0, threshold=0.0)


class RecordingPipeline(eval_answers.Pipeline):
    """The product's pipeline, with each question's reranked sources taken from `kept` when there, else
    retrieved, reranked and added to it: the generator always runs."""

    def __init__(self, settings, kb: str, kept: dict[str, list[chunk_pb2.Candidate]]):
        super().__init__(settings, kb)
        self.kept = kept

    def _ask(self, question: eval_answers.Question):
        if question.id not in self.kept:
            _, self.kept[question.id], _ = super()._ask(question)
        started = time.perf_counter()
        sources = self.kept[question.id]
        generate = generator_pb2.GenerateRequest(kb=self.kb, query=question.question, sources=sources)
        response = self._generator.Generate(self._with_settings(generate, "generator"), None)
        return response, sources, (time.perf_counter() - started) * 1000


def read_sources(path: Path) -> dict[str, list[chunk_pb2.Candidate]]:
    kept = {}
    for line in path.read_text().splitlines() if path.is_file() else ():
        record = json.loads(line)
        kept[record["id"]] = [chunk_pb2.Candidate.FromString(base64.b64decode(c)) for c in record["sources"]]
    return kept


def write_sources(path: Path, kept: dict[str, list[chunk_pb2.Candidate]]) -> None:
    path.write_text("".join(json.dumps({"id": qid, "sources": [base64.b64encode(c.SerializeToString()).decode()
                                                                for c in sources]}) + "\n"
                            for qid, sources in kept.items()))


def collect(folder: Path, name: str, fresh: bool, limit: int) -> list[eval_answers.Outcome]:
    home = Path(os.environ.get("RAGKB_DATA_DIR") or folder / "home")
    catalog = KnowledgeBaseCatalog(home)
    config = KBConfig(name="collect", generator=GeneratorConfig(
        min_evidence_score=0.0, answerability={"en": OPEN_GATE, "zh": OPEN_GATE}))
    if not catalog.exists("collect"):
        catalog.create("collect")
    catalog.replace(config)
    os.environ["RAGKB_DATA_DIR"] = str(home)
    questions = eval_answers.load_questions(folder / name / "questions.jsonl")[:limit or None]
    sources_path = folder / name / "sources.jsonl"
    kept = {} if fresh else read_sources(sources_path)
    corpus = None if all(q.id in kept for q in questions) else folder / name / "corpus.jsonl"
    with eval_answers.knowledge_base("collect", corpus) as (settings, kb):
        pipeline = RecordingPipeline(settings, kb, kept)
        try:
            outcomes = eval_answers.evaluate(pipeline, questions)
        finally:
            pipeline.close()
    write_sources(sources_path, kept)
    (folder / name / "outcomes.json").write_text(json.dumps(eval_answers.outcomes_json(outcomes)))
    return outcomes


def question_limits(text: str) -> dict[str, int]:
    """'100' -> {'': 100} (every set); 'scifact=100,cmrc2018=100' -> per set; '' -> no limit."""
    limits = {}
    for item in filter(None, text.split(",")):
        name, _, count = item.rpartition("=")
        if not count.isdigit():
            raise SystemExit(f"--limit: {item!r} is neither N nor SET=N")
        limits[name] = int(count)
    return limits


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
    parser.add_argument("--sets", default="squad2,squad2-siblings,scifact,cmrc2018,cmrc2018-siblings,samples")
    parser.add_argument("--target-answer-rate", type=float, default=0.9)
    parser.add_argument("--limit", default="", help="N: the first N questions of each set; or SET=N,SET=N for some sets")
    parser.add_argument("--fresh", action="store_true", help="re-run retrieval instead of replaying the kept sources")
    parser.add_argument("--recorded", action="store_true",
                        help="fit and report on the outcomes the last run of each set recorded, running nothing")
    parser.add_argument("--shipped", action="store_true",
                        help="report with the shipped defaults (DEFAULT_MODELS) instead of the models fitted here")
    args = parser.parse_args()
    names = [n for n in args.sets.split(",") if n]
    missing = [n for n in names if not (args.dir / n / "questions.jsonl").is_file()]
    if missing:
        raise SystemExit(f"no question set {', '.join(missing)} under {args.dir}: run scripts/bench/answer_sets.py")
    limits = question_limits(args.limit)
    if args.recorded:
        recorded = {name: [eval_answers.Outcome(**record) for record in
                           json.loads((args.dir / name / "outcomes.json").read_text())] for name in names}
    else:
        recorded = {name: collect(args.dir, name, args.fresh, limits.get(name, limits.get("", 0))) for name in names}
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
    if args.shipped:
        print("reported with the shipped defaults, not the models above")
        models = dict(DEFAULT_MODELS)
    for name, outcomes in recorded.items():
        print(f"\n== {name} (coverage floor {floor:g})")
        print(eval_answers.format_report(eval_answers.report(replay(outcomes, models, floor))))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
