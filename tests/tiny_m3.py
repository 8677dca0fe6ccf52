"""Build a tiny random bge-m3-style model that loads through FlagEmbedding's real BGEM3FlagModel path.

No weights can be downloaded here, so tests build one: MiniLM's vocabulary and tokenizer,
a two-layer random BERT encoder, and the two heads bge-m3 ships next to it
(`colbert_linear.pt`, `sparse_linear.pt`). Its vectors and lexical weights are
meaningless but deterministic for a given seed: enough for the loading, storing and
routing code.
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_m3(directory: Path, *, seed: int = 11, hidden: int = 32, layers: int = 2) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from shared.embedders import resolve_model_dir

    directory = Path(directory)
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_dir("all-MiniLM-L6-v2")))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=hidden * 2, max_position_embeddings=512)
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    torch.save(torch.nn.Linear(hidden, hidden).state_dict(), directory / "colbert_linear.pt")
    sparse = torch.nn.Linear(hidden, 1)
    torch.nn.init.constant_(sparse.bias, 0.5)  # most tokens get a positive weight, as in the trained head
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
    return directory
