"""Blue-green versions of a knowledge base: build a new index beside the live one, gate, switch, roll back.

`create` stores a new version (the live config with new chunker, embedder or store settings) and
`build` re-indexes every document into it from the registry's stored chunks: sources are not kept
after ingestion, so a version re-embeds and re-analyzes the chunks the KB already has; a changed
chunker applies to documents ingested from then on. Meanwhile the indexer writes every document to
each version (services/indexer/indexer.py), and queries keep resolving the live one.

A finished build is reconciled (a chunk a write failed to mirror is restored) and then checked:
a version that the reconciler still finds differences in fails instead of becoming ready.

`switch` measures the live and the new version on the KB's golden questions, if it has any
(`retriever.golden_questions`), and refuses when nDCG@10 drops by more than
`retriever.max_ndcg_drop`, unless forced; the decision and both metric rows are stored with the
version. The switch itself points the engines' aliases at the new index and collection, then the
catalog at the new config: the catalog is what every request resolves, so each query runs wholly
on one version (its embedder and its index) — an alias alone could pair a query vector of one
model with the collection of another during the swap. `rollback` is the same switch to a retired
version, without a gate, and moves no data. Retired versions beyond the retention count are dropped.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from services.indexer.indexer import Indexer
from services.indexer.reconciler import Reconciler
from services.indexer.registry import DocumentRegistry
from shared.config import KBConfig, yaml_mapping
from shared.errors import FailedPrecondition, InvalidArgument
from shared.kb import KnowledgeBaseCatalog
from shared.kb_versions import BUILDING, DROPPED, FAILED, READY, RETIRED, KBVersion, VersionRows, version_config

log = logging.getLogger("ragkb.indexer.versions")

# the sections a version owns: they decide what its index holds; the rest of the config is the live one's
INDEX_SECTIONS = ("chunker", "chunker_rules", "embedder", "keyword_store", "vector_store")


class VersionManager:
    """`retention`: retired versions kept for rollback after a switch; older ones are dropped."""

    def __init__(self, settings, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry, indexer: Indexer,
                 reconciler: Reconciler, *, retention: int = 1):
        if retention < 0:
            raise ValueError(f"retention must be >= 0 versions, got {retention}")
        self._settings = settings
        self._catalog = catalog
        self._registry = registry
        self._indexer = indexer
        self._reconciler = reconciler
        self._rows: VersionRows = indexer.versions
        self._retention = retention
        self._builds: dict[tuple[str, int], threading.Thread] = {}
        self._stopping = threading.Event()

    def list(self, kb: str) -> list[KBVersion]:
        """Every version of a KB; one that has none yet is recorded as version 1, live, as it is."""
        self._catalog.get(kb)  # exists and servable
        rows = self._rows.list(kb)
        if not rows:
            self._rows.adopt(kb, self._catalog.tenant_config(kb).to_tenant_yaml())
            rows = self._rows.list(kb)
        return rows

    def get(self, kb: str, version: int) -> KBVersion:
        self.list(kb)
        return self._rows.get(kb, version)

    def create(self, kb: str, config_yaml: str) -> KBVersion:
        """A new `building` version: the live config with the index sections `config_yaml` names (tenant input:
        operator settings refused, models and profiles must be offered). Refused when no index section changes."""
        self.list(kb)
        live = self._catalog.tenant_config(kb)
        data = yaml_mapping(config_yaml)
        if not isinstance(data, dict):
            raise InvalidArgument("a version's config must be a YAML mapping")
        others = sorted(map(str, set(data) - set(INDEX_SECTIONS)))
        if others:
            raise InvalidArgument(f"a version sets only {', '.join(INDEX_SECTIONS)}; {', '.join(others)} "
                                  "belong to the knowledge base (ragkb kb configure)")
        proposed = KBConfig.from_tenant_mapping(data, name=kb, profiles=self._catalog.profiles)
        # a section the config names replaces the live one's; the others stay
        candidate = live.model_copy(update={section: getattr(proposed, section) for section in data})
        if all(getattr(candidate, s) == getattr(live, s) for s in INDEX_SECTIONS):
            raise InvalidArgument(f"the config changes none of {', '.join(INDEX_SECTIONS)}: no new index is needed")
        self._catalog.check_mode(candidate)
        return self._rows.create(
            kb, lambda number: candidate.model_copy(update={"index_version": number}).to_tenant_yaml())

    def start_build(self, kb: str, version: int) -> None:
        """`build` on a background thread of this process (the indexer's, which holds the stores)."""
        key = (kb, version)
        if key in self._builds and self._builds[key].is_alive():
            return
        thread = threading.Thread(target=self.build, args=(kb, version), name=f"build-{kb}-v{version}", daemon=True)
        self._builds[key] = thread
        thread.start()

    def resume_builds(self) -> None:
        """Start again every build a previous process left unfinished (a build is idempotent per document)."""
        for kb in self._catalog.names():
            for version in self._rows.list(kb):
                if version.state == BUILDING:
                    self.start_build(kb, version.version)

    def stop(self) -> None:
        """Let running builds stop after their current document (they stay `building`); before the stores close."""
        self._stopping.set()
        for thread in list(self._builds.values()):
            thread.join(timeout=120)

    def wait(self, kb: str, version: int, timeout_s: float | None = None) -> KBVersion:
        """The version once its build thread (if any) has finished."""
        thread = self._builds.get((kb, version))
        if thread is not None:
            thread.join(timeout_s)
        return self._rows.get(kb, version)

    def build(self, kb: str, version: int) -> KBVersion:
        """Re-index every document of the KB into a building version, then reconcile and check it: `ready`
        when consistent, `failed` (with the error) otherwise."""
        lease = self._indexer.build_lock(kb, version)
        if not lease.acquire(blocking=False):  # another replica builds it; if that one dies, the next to start resumes
            return self._rows.get(kb, version)
        try:
            return self._build(kb, version)
        finally:
            lease.release()

    def _build(self, kb: str, version: int) -> KBVersion:
        row = self._rows.get(kb, version)
        if row.state != BUILDING:
            raise FailedPrecondition(f"version {version} of knowledge base {kb!r} is {row.state}, not building")
        try:
            config = version_config(row, self._catalog.profiles)
            self._indexer.open_stores(config)  # creates the index and the collection
            entries = self._registry.list(kb)
            self._rows.progress(kb, version, 0, len(entries))
            for done, entry in enumerate(entries, start=1):
                if self._stopping.is_set():  # the process is stopping: the next one resumes the build
                    return self._rows.get(kb, version)
                with self._indexer.document_lock(kb, entry.namespace, entry.doc_id):
                    self._indexer.copy_document(config, entry.namespace, entry.doc_id)
                self._rows.progress(kb, version, done, len(entries))
            self._reconciler.reconcile(config)
            check = self._reconciler.reconcile(config, dry_run=True)
            if check.repairs:
                problems = ", ".join(f"{r.namespace}/{r.doc_id}: {r.action}" for r in check.repairs[:3])
                raise FailedPrecondition(f"the reconciler still finds {len(check.repairs)} documents that differ "
                                         f"from the registry ({problems})")
            return self._rows.move(kb, version, READY)
        except Exception as error:
            log.exception("building version %d of %s failed", version, kb)
            return self._rows.move(kb, version, FAILED, error=str(error)[:2000])

    def switch(self, kb: str, version: int, *, force: bool = False, namespaces: list[str] | None = None) -> KBVersion:
        """Gate a ready version on the golden questions and make it live; a retired one comes back ungated."""
        target = self.get(kb, version)
        if target.state not in (READY, RETIRED):
            raise FailedPrecondition(f"version {version} of knowledge base {kb!r} is {target.state}; only a ready "
                                     "or a retired version can become live")
        live_config = self._catalog.tenant_config(kb)
        next_config = self._next_config(live_config, target)
        decision = None
        if target.state == READY:
            decision = self._gate(kb, live_config, next_config, namespaces or ["default"], force=force)
        self._go_live(kb, next_config, version, decision)
        self._retire_beyond_retention(kb)
        return self._rows.get(kb, version)

    def rollback(self, kb: str, to: int | None = None) -> KBVersion:
        """Back to a retired version (`to`, or the one retired last): one alias swap, no data moved."""
        retired = [v for v in self.list(kb) if v.state == RETIRED]
        if to is None:
            if not retired:
                raise FailedPrecondition(f"knowledge base {kb!r} has no retired version to roll back to")
            to = max(retired, key=lambda v: (v.updated_at, v.version)).version
        elif to not in {v.version for v in retired}:
            raise FailedPrecondition(f"version {to} of knowledge base {kb!r} is {self._rows.get(kb, to).state}, "
                                     "not retired: roll back only to a version that was live and is still kept")
        target = self._rows.get(kb, to)
        self._go_live(kb, self._next_config(self._catalog.tenant_config(kb), target), to, None)
        return self._rows.get(kb, to)

    def drop(self, kb: str, version: int) -> KBVersion:
        """Delete a version's index and collection; the live one and one being built are refused."""
        target = self.get(kb, version)
        if target.state not in (READY, RETIRED, FAILED):
            raise FailedPrecondition(f"version {version} of knowledge base {kb!r} is {target.state}; only a ready, "
                                     "retired or failed version can be dropped")
        config = version_config(target, self._catalog.profiles)
        _, keyword, vector = self._indexer.open_stores(config)
        keyword.drop()
        vector.drop()
        return self._rows.move(kb, version, DROPPED)

    def _next_config(self, live: KBConfig, target: KBVersion) -> KBConfig:
        """The config a switch stores: the live one's query settings, the target's index sections and number."""
        stored = KBConfig.from_yaml(target.config_yaml, name=target.kb).tenant_view()
        return live.model_copy(update={section: getattr(stored, section)
                                       for section in (*INDEX_SECTIONS, "index_version")})

    def _gate(self, kb: str, live: KBConfig, candidate: KBConfig, namespaces: list[str], *, force: bool) -> dict:
        """Both versions measured on the golden questions; raises (after storing the decision) on a refusal."""
        from ragkb.gate import ndcg_row
        from ragkb.tune import read_questions

        golden = live.retriever.golden_questions
        if not golden:
            return {"outcome": "switched", "gated": False, "forced": force}
        questions = read_questions(Path(golden))
        profiles = self._catalog.profiles
        before = ndcg_row(self._settings, live.resolve(profiles), questions, namespaces)
        after = ndcg_row(self._settings, candidate.resolve(profiles), questions, namespaces)
        margin = live.retriever.max_ndcg_drop
        worse = before["hybrid"] - after["hybrid"] > margin
        decision = {"gated": True, "golden_questions": golden, "metric": "ndcg@10", "margin": margin,
                    "before": {"version": live.index_version, **before},
                    "after": {"version": candidate.index_version, **after},
                    "forced": bool(worse and force), "outcome": "refused" if worse and not force else "switched"}
        if decision["outcome"] == "refused":
            self._rows.decide(kb, candidate.index_version, decision)
            raise FailedPrecondition(
                f"refused: nDCG@10 on {golden} drops from {before['hybrid']:.4f} (version {live.index_version}) "
                f"to {after['hybrid']:.4f} (version {candidate.index_version}), more than the allowed {margin:g} "
                "(retriever.max_ndcg_drop); the live version stays; pass --force to switch anyway")
        return decision

    def _go_live(self, kb: str, config: KBConfig, version: int, decision: dict | None) -> None:
        """Aliases first (stable names for the engines' own tools), then the catalog every request resolves,
        then the rows."""
        _, keyword, vector = self._indexer.open_stores(config.resolve(self._catalog.profiles))
        keyword.make_live()
        vector.make_live()
        self._catalog.replace(config)
        self._rows.switch(kb, version, decision)
        log.info("knowledge base %s: version %d is live", kb, version)

    def _retire_beyond_retention(self, kb: str) -> None:
        retired = sorted((v for v in self._rows.list(kb) if v.state == RETIRED),
                         key=lambda v: (v.updated_at, v.version), reverse=True)
        for old in retired[self._retention:]:
            try:
                self.drop(kb, old.version)
            except Exception:  # the switch has happened; the version stays retired and can be dropped later
                log.exception("knowledge base %s: dropping retired version %d failed", kb, old.version)

