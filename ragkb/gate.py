"""The retrieval regression gate: a KB configuration change is measured on the KB's golden questions first.

    ragkb kb configure --kb K --config FILE [--force]

When the KB (or the proposed configuration) names `retriever.golden_questions`, a change
of the retriever section runs those questions through the retriever with the current
and with the proposed configuration, over the same stores. The change is refused when
nDCG@10 drops by more than `retriever.max_ndcg_drop`, unless forced; what was measured
is stored with the configuration it let through. An embedder change cannot be gated in
place: the stored vectors belong to the old model (the indexer refuses to mix models),
so it needs a new knowledge base, measured there with `ragkb tune` or `ragkb eval`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from ragkb.tune import collect_runs, read_questions, route_ndcg
from shared.config import GateRecord, KBConfig
from shared.contracts import chunk_pb2
from shared.errors import FailedPrecondition
from shared.kb import KnowledgeBaseCatalog

MEASUREMENT_FIELDS = {"tuning", "gate"}  # records of past measurements, not settings


def hybrid_ndcg(settings, kb: KBConfig, questions, namespaces: list[str]) -> float:
    """nDCG@10 of the hybrid list under the effective config `kb`, measured on the KB's real stores."""
    return ndcg_row(settings, kb, questions, namespaces)["hybrid"]


def ndcg_row(settings, kb: KBConfig, questions, namespaces: list[str]) -> dict[str, float]:
    """nDCG@10 of each route and of the hybrid list under the effective config `kb` (the version it names)."""
    from services.retriever.retriever import Retriever

    retriever = Retriever(settings)
    try:
        runs = collect_runs(retriever, kb, questions, chunk_pb2.SearchFilter(namespaces=namespaces),
                            progress="golden")
    finally:
        retriever.close()
    return route_ndcg(runs)


def configure_kb(settings, kb_name: str, config_yaml: str, namespaces: list[str], *, force: bool = False) -> dict:
    """Gate and store a new config for a KB. `config_yaml` is the operator's (this runs on the server): it may
    name the golden questions' file, but endpoints and paths still come only from the operator profiles."""
    catalog = KnowledgeBaseCatalog.for_settings(settings)
    current = catalog.tenant_config(kb_name)
    proposed = KBConfig.from_tenant_yaml(config_yaml, name=kb_name, profiles=catalog.profiles, operator_tool=True)
    # the version stays the live one: a new index is a new version (ragkb kb version create)
    proposed = proposed.model_copy(update={"index_version": current.index_version})
    if proposed.embedder != current.embedder:
        raise FailedPrecondition(
            f"knowledge base {kb_name!r} is indexed with {current.embedder.name} {current.embedder.model!r}; "
            "an embedder change needs a new version of the knowledge base (ragkb kb version create), "
            "which is re-indexed in the background and gated on the golden questions before it goes live")
    settings_changed = (proposed.retriever.model_dump(exclude=MEASUREMENT_FIELDS)
                        != current.retriever.model_dump(exclude=MEASUREMENT_FIELDS))
    golden = proposed.retriever.golden_questions or current.retriever.golden_questions
    report: dict = {"kb": kb_name, "gated": bool(settings_changed and golden), "stored": True}
    if report["gated"]:
        questions = read_questions(Path(golden))
        before = hybrid_ndcg(settings, catalog.get(kb_name), questions, namespaces)
        after = hybrid_ndcg(settings, proposed.resolve(catalog.profiles), questions,
                            namespaces)
        report |= {"golden_questions": golden, "ndcg@10_before": before, "ndcg@10_after": after}
        drop_limit = proposed.retriever.max_ndcg_drop
        if before - after > drop_limit and not force:
            raise FailedPrecondition(
                f"refused: nDCG@10 on {golden} drops from {before:.4f} to {after:.4f}, more than the allowed "
                f"{drop_limit:g} (retriever.max_ndcg_drop); fix the change or pass --force")
        record = GateRecord(golden_questions=golden, measured_at=datetime.now(timezone.utc).isoformat(),
                            ndcg10_before=before, ndcg10_after=after, forced=before - after > drop_limit)
        proposed = proposed.model_copy(update={"retriever": proposed.retriever.model_copy(update={"gate": record})})
    catalog.replace(proposed)
    return report
