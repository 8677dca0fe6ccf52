"""Answerability: answer or refuse, from several evidence signals combined by a calibrated logistic model.

The model is `P(answerable) = sigmoid(bias + sum(weight_i * signal_i))` over the
signals of `evidence.SIGNALS`, one model per question language (the embedder may
understand one language and not another, so the same signal means different
things). `ragkb calibrate` fits it on labelled questions of a KB and stores it,
with the threshold that keeps the target share of answerable questions
answered, in the KB config; without one the defaults below apply, fitted the
same way on the tuning part of the development sets (`scripts/bench/answer_sets.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from services.generator.evidence import SIGNALS, Evidence
from shared.config import AnswerabilityModel, GeneratorConfig

# Fitted by `python scripts/bench/answer_quality.py --recorded` (target answer rate 0.9) on the tune parts of
# the development sets: for English the SQuAD 2.0 subset, squad2-siblings (an answer's passage left out of the
# index, its topic's other passages kept), SciFact and the bundled samples; for Chinese CMRC2018, cmrc2018-siblings
# and the samples. Answers built on the default retriever's sources (convex(zscore), BM25 0.6 / dense 0.4): the
# signals depend on which sources fusion brings, so a new fusion default needs a re-fit. The English threshold
# answers 90% of the answerable questions and, through the `claim_form` weight, 90% of the answerable statements
# (SciFact's claims). MiniLM understands no Chinese, so the Chinese model leans on lexical signals.
DEFAULT_MODELS: dict[str, AnswerabilityModel] = {
    "en": AnswerabilityModel(features=SIGNALS, weights=(1.22331, -0.7901, 0.04784, 2.70698, 3.7851, 1.37031, 1.3795,
                                                        0.37776, 0.0, -2.14999, -1.32207, -1.12587, -0.11915),
                             bias=-5.17024, threshold=0.375936),
    "zh": AnswerabilityModel(features=SIGNALS, weights=(4.68246, -1.16169, 3.96276, 0.0, -0.11508, 9.9542, 2.77911,
                                                        0.29101, 0.0, 0.36231, -1.35413, 0.03231, 0.0),
                             bias=-6.98898, threshold=0.2913),
}


@dataclass(frozen=True)
class Decision:
    score: float  # P(answerable) under the model, 0..1
    threshold: float
    refuse: bool
    reason: str  # why it refused or why it answered, in words a user can check
    signals: Mapping[str, float]


def model_for(config: GeneratorConfig, language: str) -> AnswerabilityModel:
    models = {**DEFAULT_MODELS, **config.answerability}
    return models.get(language) or models["en"]


def probability(model: AnswerabilityModel, signals: Mapping[str, float]) -> float:
    z = model.bias + sum(w * signals.get(f, 0.0) for f, w in zip(model.features, model.weights))
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


# The model's BM25 strength and dense margin are relative to the corpus and to both routes answering: in a
# knowledge base of one or two passages every term is in most documents (BM25 idf near 0) and the runner-up
# is unrelated (a huge margin), and a route that is down leaves its signals at 0, none of which the model
# saw when it was fitted. Then the coverage floor decides alone.
MIN_RANKED_SOURCES = 3


def incomplete_signals(sources: Sequence) -> str | None:
    """Why the calibrated model cannot judge these retrieved sources, or None (also for unranked chunks)."""
    ranked = [c for c in sources if c.bm25_rank or c.dense_rank]
    if not ranked:
        return None
    if len(ranked) < MIN_RANKED_SOURCES:
        return f"{len(ranked)} retrieved source(s) are too few for the calibrated model"
    for route, rank in (("keyword", "bm25_rank"), ("dense", "dense_rank")):
        if not any(getattr(c, rank) for c in ranked):
            return f"the {route} route found none of the sources (down or no match)"
    return None


def decide(config: GeneratorConfig, evidence: Evidence, has_sources: bool, *, incomplete: str | None = None) -> Decision:
    """`incomplete`: why the retrieval signals cannot feed the model (`incomplete_signals`); the floor decides."""
    if not has_sources:
        return Decision(0.0, 0.0, True, "no sources survived retrieval and reranking", {})
    if not evidence.span:
        return Decision(0.0, 0.0, True, "no source sentence shares a content word with the question",
                        evidence.signals)
    if incomplete:
        return Decision(evidence.signals["coverage"], config.min_evidence_score, False,
                        f"{incomplete}; decided by the coverage floor", evidence.signals)
    model = model_for(config, evidence.language)
    score = round(probability(model, evidence.signals), 4)
    strongest = _contributions(model, evidence.signals)
    if score < model.threshold:
        weakest = ", ".join(f"{name} {evidence.signals.get(name, 0.0):.2f}" for name, _ in strongest[-2:])
        return Decision(score, model.threshold, True,
                        f"evidence score {score:.2f} is below the threshold {model.threshold:.2f} "
                        f"(weakest signals: {weakest})", evidence.signals)
    best = ", ".join(f"{name} {evidence.signals.get(name, 0.0):.2f}" for name, _ in strongest[:2])
    return Decision(score, model.threshold, False,
                    f"evidence score {score:.2f} reaches the threshold {model.threshold:.2f} "
                    f"(strongest signals: {best})", evidence.signals)


def _contributions(model: AnswerabilityModel, signals: Mapping[str, float]) -> list[tuple[str, float]]:
    """Signals ordered by how much they raise the score, strongest first (zero-weight signals left out)."""
    pairs = [(f, w * signals.get(f, 0.0)) for f, w in zip(model.features, model.weights) if w != 0]
    return sorted(pairs, key=lambda p: -p[1])


def fit(rows: Sequence[Mapping[str, float]], labels: Sequence[bool], *, target_answer_rate: float = 0.9,
        l2: float = 1.0, features: Sequence[str] = SIGNALS) -> AnswerabilityModel:
    """L2-regularised logistic regression (Newton steps on standardised signals), then the threshold
    that answers `target_answer_rate` of the answerable rows; when they hold enough of both, of the answerable
    questions, with the `claim_form` weight shifted so that it answers that share of statements too."""
    if not 0 < target_answer_rate <= 1:
        raise ValueError(f"target answer rate must be in (0, 1], got {target_answer_rate}")
    y = np.array(labels, dtype=float)
    if len(y) < 10 or y.min() == y.max():
        raise ValueError(f"calibration needs at least 10 questions of both kinds, got {int(y.sum())} answerable "
                         f"and {int(len(y) - y.sum())} unanswerable")
    x = np.array([[row.get(f, 0.0) for f in features] for row in rows], dtype=float)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    w = np.zeros(z.shape[1])
    penalty = np.diag([0.0] + [l2] * (z.shape[1] - 1))
    for _ in range(50):
        p = 1 / (1 + np.exp(-np.clip(z @ w, -50, 50)))
        gradient = z.T @ (p - y) + penalty @ w
        hessian = z.T @ (z * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = w[1:] / scale
    bias = w[0] - float(np.sum(w[1:] * mean / scale))
    model = AnswerabilityModel(features=tuple(features), weights=tuple(round(float(v), 5) for v in weights),
                               bias=round(float(bias), 5), threshold=0.5)
    answerable = [row for row, label in zip(rows, labels) if label]
    by_form = _both_forms(answerable, features)
    questions = [row for row in answerable if not row.get(CLAIM_FORM)] if by_form else answerable
    model = model.model_copy(update={"threshold": _cut([probability(model, row) for row in questions],
                                                       target_answer_rate)})
    if by_form:
        model = _calibrate_claims(model, [row for row in answerable if row.get(CLAIM_FORM)], target_answer_rate)
    return model


CLAIM_FORM = "claim_form"
MIN_PER_FORM = 10  # answerable questions of each form for a threshold of its own


def _both_forms(answerable: Sequence[Mapping[str, float]], features: Sequence[str]) -> bool:
    """Whether the answerable rows hold enough questions and statements to calibrate each form on its own."""
    claims = sum(1 for row in answerable if row.get(CLAIM_FORM))
    return CLAIM_FORM in features and MIN_PER_FORM <= claims <= len(answerable) - MIN_PER_FORM


def _lowest_answered(values: Sequence[float], target_answer_rate: float) -> float:
    """The lowest of the values that the `target_answer_rate` share with the highest values reaches."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.floor((1 - target_answer_rate) * len(ordered))))]


def _cut(scores: Sequence[float], target_answer_rate: float) -> float:
    """The threshold that answers `target_answer_rate` of the (answerable) rows with these scores."""
    return round(max(0.0, _lowest_answered(scores, target_answer_rate) - 1e-6), 6)


def _calibrate_claims(model: AnswerabilityModel, claims: Sequence[Mapping[str, float]],
                      target_answer_rate: float) -> AnswerabilityModel:
    """Shift the `claim_form` weight so the threshold (set on questions) also answers `target_answer_rate` of the
    answerable statements: a claim's evidence scores lower than a question's, and a threshold set on the pooled
    rows would answer the more numerous form at the other's expense."""
    if model.threshold <= 0:
        return model  # every row is answered whatever its form
    logit = math.log(model.threshold / (1 - model.threshold))
    needed = _lowest_answered([model.bias + sum(w * row.get(f, 0.0) for f, w in zip(model.features, model.weights))
                               for row in claims], target_answer_rate)
    weights = list(model.weights)
    index = model.features.index(CLAIM_FORM)
    weights[index] = round(weights[index] + (logit - needed) + 1e-5, 5)
    return model.model_copy(update={"weights": tuple(weights)})
