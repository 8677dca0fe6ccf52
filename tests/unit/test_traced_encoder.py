"""The embedder's transformer traced to one TorchScript graph (shared/traced_encoder.py): same vectors, or eager."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from shared import traced_encoder
from shared.embedders import SentenceTransformerEmbedder, length_batches, resolve_model_dir
from shared.traced_encoder import trace_transformer

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TEXTS = ["What is the maximum payload?", "短句", "a [UNK] b", "the robot moved pallets " * 80,
         "机器人在仓库里搬运货物，最大载重一百二十公斤。", "Zürich façade, 12.5 kg at 3 m/s", ""]


def eager_model() -> SentenceTransformer:
    return SentenceTransformer(str(resolve_model_dir("all-MiniLM-L6-v2")), device="cpu", local_files_only=True)


def eager_vectors(model: SentenceTransformer, texts: list[str]) -> np.ndarray:
    vectors = np.zeros((len(texts), 384), dtype=np.float32)
    for batch in length_batches([len(t) for t in texts], 32):
        vectors[batch] = model.encode([texts[i] for i in batch], batch_size=32, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False)
    return vectors


def corpus_texts() -> list[str]:
    texts = list(TEXTS)
    for name, count in (("scifact", 120), ("cmrc2018_beir", 40)):
        path = DATA / name / "corpus.jsonl"
        if path.exists():
            with path.open(encoding="utf-8") as lines:
                texts += [json.loads(line)["text"] for line, _ in zip(lines, range(count))]
    return texts


def test_minilm_is_traced_and_its_vectors_are_the_eager_models():
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert embedder.traced
    texts = corpus_texts()
    assert np.array_equal(embedder.embed_documents(texts), eager_vectors(eager_model(), texts))
    alone = embedder.embed_query(TEXTS[0])
    assert np.array_equal(alone, eager_vectors(eager_model(), TEXTS[:1])[0])


def test_a_trace_that_differs_from_the_eager_model_is_not_used(monkeypatch, caplog):
    model = eager_model()
    eager = model[0].model
    forward = traced_encoder._TracedTransformer.forward

    def off_by_a_little(self, **features):  # a graph that computes something slightly else
        output = forward(self, **features)
        output.last_hidden_state = output.last_hidden_state + 1e-3
        return output

    monkeypatch.setattr(traced_encoder._TracedTransformer, "forward", off_by_a_little)
    assert trace_transformer(model) is False
    assert model[0].model is eager
    assert "differs from the eager model" in caplog.text
    assert np.array_equal(eager_vectors(model, TEXTS), eager_vectors(eager_model(), TEXTS))


def test_a_model_the_tracer_cannot_follow_stays_eager(monkeypatch, caplog):
    model = eager_model()
    eager = model[0].model

    def refuse(*args, **kwargs):
        raise RuntimeError("unsupported operator")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    assert trace_transformer(model) is False
    assert model[0].model is eager and "not traced (RuntimeError: unsupported operator)" in caplog.text


@pytest.mark.parametrize("texts", [["one"], ["two texts", "of the same length"]])
def test_a_trace_is_taken_only_on_a_padded_batch(monkeypatch, texts):
    """A batch without padding would record the branch that skips the attention mask."""
    model = eager_model()
    monkeypatch.setattr(traced_encoder, "_TRACE_TEXTS", [texts[0]] * len(texts))
    assert trace_transformer(model) is False and model[0].model.__class__.__name__ == "BertModel"
