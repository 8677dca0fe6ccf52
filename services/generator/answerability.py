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
# the development sets: SQuAD 2.0 subset, SciFact and the bundled samples for English; CMRC2018 and the
# samples for Chinese; answers built on the default retriever's sources (convex(zscore), BM25 0.6 / dense
# 0.4): the signals depend on which sources fusion brings, so a new fusion default needs a re-fit. MiniLM
# understands no Chinese, so the Chinese model leans on lexical signals. Both were fitted before the question
# cues were limited to queries worded as questions (SciFact's claims then raised them too) and before
# `claim_form` existed, so its weight is 0 here; `ragkb calibrate` fits it. A refit on the gated signals
# (README, Answers users can trust) was measured and not shipped: it answers fewer of the Normans
# integration questions whose citation is right (tests/integration/test_answer_eval.py).
DEFAULT_MODELS: dict[str, AnswerabilityModel] = {
    "en": AnswerabilityModel(features=SIGNALS, weights=(1.04527, 0.21803, -1.65466, 1.77305, 5.33903, -2.52076,
                                                        1.15336, 0.81334, 0.0, -3.03914, -1.96799, -1.39693, 0.0),
                             bias=-5.18284, threshold=0.302498),
    "zh": AnswerabilityModel(features=SIGNALS, weights=(4.18146, 1.60512, 1.86561, 0.0, 2.73544, 4.77926, 5.26223,
                                                        0.90835, 0.0, -0.98125, 0.0, 0.01444, 0.0),
                             bias=-10.80989, threshold=0.381212),
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
    that answers `target_answer_rate` of the answerable rows."""
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
    answerable = sorted(probability(model, row) for row, label in zip(rows, labels) if label)
    cut = answerable[min(len(answerable) - 1, int(math.floor((1 - target_answer_rate) * len(answerable))))]
    return model.model_copy(update={"threshold": round(max(0.0, cut - 1e-6), 6)})
