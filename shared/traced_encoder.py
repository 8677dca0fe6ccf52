"""A sentence-transformers model's transformer run as one TorchScript graph.

An eager PyTorch forward pass goes back to Python between its few hundred operators, and takes
the GIL each time. In a server whose request threads hold the GIL about half the time, every
hand-back waits for a switch interval: with all-MiniLM-L6-v2 on 2 cores, one query took 16 ms
alone and 690 ms beside two busy Python threads; the traced graph runs its operators in C++ and
took 14 and 125 ms. Under 8 concurrent clients the model thread was busy 100% of the time with
passes of 7 queries taking ~110 ms that take ~35 ms alone.

The trace is taken on a padded batch (a batch without padding would record the branch that
skips the attention mask) and used only if it gives the eager model's outputs on probe texts of
other shapes; otherwise the model stays eager. The vectors are the same either way.
"""

from __future__ import annotations

import logging
import warnings

import torch

log = logging.getLogger("ragkb.embedders")

# different lengths (padding in the trace), batch sizes, scripts and a text past a short trace
_TRACE_TEXTS = ["What is the maximum payload?", "机器人在仓库里搬运货物，最大载重一百二十公斤，速度每秒一点五米。"]
_PROBES = [["a"], ["Zürich façade ünïcödé, 12.5 kg at 3 m/s"] * 3,
           ["the robot moved pallets between the racks " * 12, "短句", "a [UNK] b"]]
_TOLERANCE = 1e-6


class _TracedTransformer(torch.nn.Module):
    """Stands in for the Hugging Face model inside the sentence-transformers Transformer module."""

    def __init__(self, eager: torch.nn.Module, traced: torch.jit.ScriptModule, inputs: tuple[str, ...]):
        super().__init__()
        self.config = eager.config
        self._traced = traced
        self._inputs = inputs

    def forward(self, **features):
        from transformers.modeling_outputs import BaseModelOutput

        output = self._traced(*(features[name] for name in self._inputs))
        hidden = output["last_hidden_state"] if isinstance(output, dict) else output[0]
        return BaseModelOutput(last_hidden_state=hidden)


def trace_transformer(model) -> bool:
    """Swap `model`'s transformer (a SentenceTransformer's first module) for its traced graph when it
    reproduces the eager outputs; True if swapped. Any failure leaves the model eager."""
    module = model[0] if len(model) else None
    eager = getattr(module, "model", None)
    if eager is None or not hasattr(eager, "config") or not hasattr(model, "preprocess"):
        return False
    try:
        with torch.no_grad():
            features = model.preprocess(_TRACE_TEXTS)
            inputs = tuple(name for name in ("input_ids", "attention_mask", "token_type_ids") if name in features)
            if inputs[:2] != ("input_ids", "attention_mask") or bool(features["attention_mask"].all()):
                return False
            with warnings.catch_warnings():  # TracerWarnings about constants the graph keeps, checked below
                warnings.simplefilter("ignore")
                traced = torch.jit.freeze(torch.jit.trace(
                    eager.eval(), tuple(features[name] for name in inputs), strict=False).eval())
            expected = [_embed(model, texts) for texts in _PROBES]
            module.model = _TracedTransformer(eager, traced, inputs)
            if all(torch.allclose(_embed(model, texts), want, atol=_TOLERANCE, rtol=0)
                   for texts, want in zip(_PROBES, expected)):
                return True
            module.model = eager
            log.warning("traced transformer differs from the eager model; the model runs eager")
    except Exception as error:  # an architecture the tracer cannot follow stays eager
        module.model = eager
        log.warning("transformer not traced (%s: %s); the model runs eager", type(error).__name__, error)
    return False


def _embed(model, texts: list[str]) -> torch.Tensor:
    return torch.from_numpy(model.encode(texts, convert_to_numpy=True, normalize_embeddings=True,
                                         show_progress_bar=False))
