"""Blue-green versions of a knowledge base: build a new index beside the live one, gate, switch, roll back.

`create` stores a new version (the live config with new chunker, embedder or store settings) and
`build` re-indexes every document into it from the registry's stored chunks: sources are not kept
after ingestion, so a version re-embeds and re-analyzes the chunks the KB already has; a changed
chunker applies to documents ingested from then on. Meanwhile the indexer writes every document to
each version (services/indexer/indexer.py), and queries keep resolving the live one.

The re-index runs as jobs: the build splits the registry's documents into numbered batches stored with
the version (`kb_version_batches`), and each batch is one job — a Celery task on the ingestion workers
(`ragkb.reindex`, acknowledged late, so a batch whose worker died is delivered again) that calls the
indexer's `BuildVersionBatch`, or, without a broker, a call on a thread of this process. Either way
`run_batch` does the work, and the version's progress is the documents of its done batches. Batches
left undone by a process that stopped are queued again when an indexer starts.

When the last batch is done the version is reconciled (a chunk a write failed to mirror is restored)
and then checked: a version that the reconciler still finds differences in fails instead of becoming
ready.

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
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from services.indexer.indexer import Indexer
from services.indexer.reconciler import Reconciler
from services.indexer.registry import DocumentRegistry
from shared.config import KBConfig, yaml_mapping
from shared.errors import FailedPrecondition, InvalidArgument, Unavailable
from shared.kb import KnowledgeBaseCatalog
from shared.kb_versions import BUILDING, DROPPED, FAILED, LIVE, READY, RETIRED, KBVersion, VersionRows, version_config

log = logging.getLogger("ragkb.indexer.versions")

# the sections a version owns: they decide what its index holds; the rest of the config is the live one's
INDEX_SECTIONS = ("chunker", "chunker_rules", "embedder", "keyword_store", "vector_store")
# documents per re-index job: small enough that one job ends well within a step deadline, large enough that a
# big KB is not millions of messages
BATCH_DOCUMENTS = 16
WAIT_POLL_S = 0.2
# publishes one re-index job (kb, version, batch) to the workers (services.worker.tasks.publish_reindex)
Publish = Callable[[str, int, int], None]


class VersionManager:
    """`retention`: retired versions kept for rollback after a switch; older ones are dropped. `retention_s`: a
    retired version is also dropped once it has been retired this long (0 = no time limit). `publish`: where
    re-index jobs go (the Celery workers); None runs them on a thread of this process (embedded mode)."""

    def __init__(self, settings, catalog: KnowledgeBaseCatalog, registry: DocumentRegistry, indexer: Indexer,
                 reconciler: Reconciler, *, retention: int = 1, retention_s: float = 0.0,
                 publish: Publish | None = None):
        if retention < 0:
            raise ValueError(f"retention must be >= 0 versions, got {retention}")
        if retention_s < 0:
            raise ValueError(f"retention time must be >= 0 seconds (0 = no limit), got {retention_s}")
        self._settings = settings
        self._catalog = catalog
        self._registry = registry
        self._indexer = indexer
        self._reconciler = reconciler
        self._rows: VersionRows = indexer.versions
        self._retention = retention
        self._retention_s = retention_s
        self._publish = publish
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
        """Start again every build a previous process left unfinished: its batches not done yet are queued again
        (a batch is idempotent, so one still queued from before only runs twice)."""
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
        """The version once its build has finished here, or (its batches on the workers) once it is no longer
        building; the row as it is when `timeout_s` runs out."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        thread = self._builds.get((kb, version))
        if thread is not None:
            thread.join(timeout_s)
        while self._publish is not None and self._rows.get(kb, version).state == BUILDING \
                and (deadline is None or time.monotonic() < deadline):
            time.sleep(WAIT_POLL_S)
        return self._rows.get(kb, version)

    def build(self, kb: str, version: int) -> KBVersion:
        """Plan the re-index jobs of a building version and run them: on the Celery workers when a broker is
        configured (this returns once they are queued), else here, one after the other.

        The last batch to finish reconciles and checks the version (`finish`)."""
        lease = self._indexer.build_lock(kb, version)
        if not lease.acquire(blocking=False):  # another replica plans it; if that one dies, the next to start resumes
            return self._rows.get(kb, version)
        try:
            pending = self._plan(kb, version)
        finally:
            lease.release()
        if pending is None:
            return self._rows.get(kb, version)
        if not pending:  # nothing to re-index (an empty KB, or every batch was done before a restart)
            return self.finish(kb, version)
        if self._publish is not None:
            for batch in pending:
                self._publish(kb, version, batch)
            return self._rows.get(kb, version)
        for batch in pending:
            if self._stopping.is_set():  # the process is stopping: the next one resumes the build
                break
            try:
                self.run_batch(kb, version, batch)
            except Unavailable:  # stopping mid-batch
                break
        return self._rows.get(kb, version)

    def _plan(self, kb: str, version: int) -> list[int] | None:
        """Create the version's index and collection and split the registry's documents into batches (once);
        the batches not done yet, or None when the version is not building (or could not be opened: failed)."""
        row = self._rows.get(kb, version)
        if row.state != BUILDING:
            return None
        try:
            self._indexer.open_stores(version_config(row, self._catalog.profiles))
            documents = [(entry.namespace, entry.doc_id) for entry in self._registry.list(kb)]
            self._rows.plan(kb, version, [documents[start:start + BATCH_DOCUMENTS]
                                          for start in range(0, len(documents), BATCH_DOCUMENTS)])
            return self._rows.pending_batches(kb, version)
        except Exception as error:
            self._fail(kb, version, error)
            return None

    def run_batch(self, kb: str, version: int, batch: int) -> KBVersion:
        """One re-index job: copy each document of a planned batch into the version from the registry's stored
        chunks (under the document's lock, like every write), mark the batch done; the last one finishes the
        build. Idempotent: a redelivered batch finds its chunks present and writes nothing. A version that is no
        longer building (failed, dropped meanwhile) is left alone."""
        row = self._rows.get(kb, version)
        if row.state != BUILDING:
            return row
        try:
            config = version_config(row, self._catalog.profiles)
            for namespace, doc_id in self._rows.batch(kb, version, batch):
                if self._stopping.is_set():
                    raise Unavailable(f"the indexer is stopping; batch {batch} of version {version} of {kb!r} "
                                      "runs again")
                with self._indexer.document_lock(kb, namespace, doc_id):
                    self._indexer.copy_document(config, namespace, doc_id)
            self._rows.finish_batch(kb, version, batch)
        except Unavailable:
            raise
        except Exception as error:
            return self._fail(kb, version, error)
        if self._rows.pending_batches(kb, version):
            return self._rows.get(kb, version)
        return self.finish(kb, version)

    def finish(self, kb: str, version: int) -> KBVersion:
        """Once every batch is done: reconcile the version (restoring what a write failed to mirror) and check it:
        `ready` when consistent, `failed` (with the error) otherwise. Under the build lock, so it runs once."""
        with self._indexer.build_lock(kb, version):
            row = self._rows.get(kb, version)
            if row.state != BUILDING or self._rows.pending_batches(kb, version):
                return row
            try:
                self._reconcile_clean(version_config(row, self._catalog.profiles))
                return self._rows.move(kb, version, READY)
            except Exception as error:
                return self._fail(kb, version, error)

    def _reconcile_clean(self, config: KBConfig) -> None:
        """Repair a version against the registry, then refuse it unless a dry run finds nothing left."""
        self._reconciler.reconcile(config)
        check = self._reconciler.reconcile(config, dry_run=True)
        if check.repairs:
            problems = ", ".join(f"{r.namespace}/{r.doc_id}: {r.action}" for r in check.repairs[:3])
            raise FailedPrecondition(f"the reconciler still finds {len(check.repairs)} documents of version "
                                     f"{config.index_version} that differ from the registry ({problems})")

    def _fail(self, kb: str, version: int, error: Exception) -> KBVersion:
        log.error("building version %d of %s failed: %s", version, kb, error, exc_info=error)
        try:
            return self._rows.move(kb, version, FAILED, error=str(error)[:2000])
        except FailedPrecondition:  # another job moved it first
            return self._rows.get(kb, version)

    def switch(self, kb: str, version: int, *, force: bool = False, namespaces: list[str] | None = None) -> KBVersion:
        """Gate a ready version on the golden questions and make it live; a retired one comes back ungated.

        Idempotent: a switch an interruption stopped half-way is completed or undone first (`_repair_live`),
        and switching to the live version changes nothing."""
        self.list(kb)
        with self._indexer.switch_lock(kb):
            self._repair_live(kb)
            target = self._rows.get(kb, version)
            if target.state == LIVE:
                return target
            if target.state not in (READY, RETIRED):
                raise FailedPrecondition(f"version {version} of knowledge base {kb!r} is {target.state}; only a "
                                         "ready or a retired version can become live")
            live_config = self._catalog.tenant_config(kb)
            next_config = self._next_config(live_config, target)
            decision = None
            if target.state == READY:  # complete and consistent now: a write mirrored since the build may have failed
                self._reconcile_clean(version_config(target, self._catalog.profiles))
                decision = self._gate(kb, live_config, next_config, namespaces or ["default"], force=force)
            self._go_live(kb, next_config, version, decision)
        self._apply_retention(kb)
        return self._rows.get(kb, version)

    def rollback(self, kb: str, to: int | None = None) -> KBVersion:
        """Back to a retired version (`to`, or the one retired last): one alias swap, no data moved. Rolling
        back `to` the live version (a repeated rollback) changes nothing."""
        self.list(kb)
        with self._indexer.switch_lock(kb):
            self._repair_live(kb)
            if to is not None and self._rows.get(kb, to).state == LIVE:
                return self._rows.get(kb, to)
            retired = [v for v in self._rows.list(kb) if v.state == RETIRED]
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
        """The decision, then the aliases (stable names for the engines' own tools), then the catalog every
        request resolves — the commit point — then the rows. An interruption anywhere is set right by
        `_repair_live` (on the next switch, rollback, or indexer start)."""
        if decision is not None:
            self._rows.decide(kb, version, decision)  # kept even if the process stops before the rows move
        _, keyword, vector = self._indexer.open_stores(config.resolve(self._catalog.profiles))
        keyword.make_live()
        vector.make_live()
        self._catalog.replace(config)
        self._rows.switch(kb, version, decision)
        log.info("knowledge base %s: version %d is live", kb, version)

    def _repair_live(self, kb: str) -> None:
        """Make the rows and the engines' aliases agree with the catalog, the switch's commit point (the caller
        holds the switch lock): a switch stopped before its catalog write leaves the aliases ahead (they are
        pointed back), one stopped after it leaves the rows behind (they follow). A KB without version rows has
        nothing to repair."""
        rows = self._rows.list(kb)
        if not rows:
            return
        config = self._catalog.get(kb)
        if not any(v.version == config.index_version and v.state == LIVE for v in rows):
            self._rows.switch(kb, config.index_version)
            log.warning("knowledge base %s: a switch to version %d was interrupted after the catalog write; its "
                        "rows are moved now", kb, config.index_version)
        _, keyword, vector = self._indexer.open_stores(config)
        keyword.make_live()  # one atomic alias update each; a no-op when they name it already
        vector.make_live()

    def repair_every_live(self) -> None:
        """`_repair_live` for every KB (indexer start): an interrupted switch never outlives a restart."""
        for kb in self._catalog.names():
            try:
                with self._indexer.switch_lock(kb):
                    self._repair_live(kb)
            except Exception:  # one KB's engine being down must not keep the indexer from starting
                log.exception("knowledge base %s: could not bring its versions in line with the catalog", kb)

    def held_configs(self, kb: str) -> list[KBConfig]:
        """The live config, then the other versions whose index is complete (ready, retired): what the scheduled
        reconciliation repairs, so a mirrored write that failed for one of them is restored (a building version
        is reconciled when its last batch is done)."""
        live = self._catalog.get(kb)
        return [live] + [version_config(v, self._catalog.profiles) for v in self._rows.held(kb)
                         if v.version != live.index_version and v.state in (READY, RETIRED)]

    def apply_retention(self) -> None:
        """Drop, in every KB, the retired versions beyond the retention count or older than the retention time
        (on start and each scheduled round: a time limit passes without any switch)."""
        for kb in self._catalog.names():
            self._apply_retention(kb)

    def _apply_retention(self, kb: str) -> None:
        retired = sorted((v for v in self._rows.list(kb) if v.state == RETIRED),
                         key=lambda v: (v.updated_at, v.version), reverse=True)
        expired = []
        if self._retention_s:
            oldest = datetime.now(timezone.utc) - timedelta(seconds=self._retention_s)
            oldest = oldest.isoformat(timespec="milliseconds")
            expired = [v for v in retired if v.updated_at < oldest]  # updated_at: when it was retired
        for old in sorted({v.version: v for v in [*retired[self._retention:], *expired]}.values(),
                          key=lambda v: v.version):
            try:
                self.drop(kb, old.version)
                log.info("knowledge base %s: retired version %d dropped (retention)", kb, old.version)
            except Exception:  # the switch has happened; the version stays retired and can be dropped later
                log.exception("knowledge base %s: dropping retired version %d failed", kb, old.version)
