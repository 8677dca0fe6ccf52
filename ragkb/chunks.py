"""What the framework adapters (LangChain, LlamaIndex) keep of a returned chunk, in one place."""

from __future__ import annotations


def chunk_text(candidate: dict) -> str:
    chunk = candidate["chunk"]
    return chunk.get("raw_content") or chunk.get("content", "")


def chunk_metadata(candidate: dict, trace_id: str = "") -> dict:
    """Ids, heading path, source and scores of one final chunk (after fusion and reranking)."""
    chunk = candidate["chunk"]
    return {
        "chunk_id": chunk["chunk_id"], "doc_id": chunk["doc_id"], "kb": chunk["kb"], "namespace": chunk["namespace"],
        "heading_path": list(chunk.get("heading_path", [])), "source": chunk.get("source", {}).get("uri", ""),
        "score": candidate.get("score", 0.0), "rerank_score": candidate.get("rerank_score", 0.0),
        "bm25_rank": candidate.get("bm25_rank", 0), "dense_rank": candidate.get("dense_rank", 0),
        "trace_id": trace_id,
    }
