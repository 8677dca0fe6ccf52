"""Build a tiny random BERT cross-encoder that loads through FlagEmbedding's real FlagReranker path.

No weights can be downloaded here, so tests (and the rerank benchmark) build one:
MiniLM's vocabulary and tokenizer, two small layers, one output logit. Its scores
are meaningless but deterministic for a given seed, which is all the loading,
batching and threshold code needs.
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_cross_encoder(directory: Path, *, seed: int = 7, hidden: int = 32, layers: int = 2) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from shared.embedders import resolve_model_dir

    directory = Path(directory)
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_dir("all-MiniLM-L6-v2")))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=hidden * 2, max_position_embeddings=512,
                        num_labels=1)
    model = BertForSequenceClassification(config)
    # a wider spread of logits than the default init, so sigmoid scores are not all ~0.5
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
