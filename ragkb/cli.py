"""`ragkb` command line: run the embedded stack, ingest folders, ask questions."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from tqdm import tqdm

from ragkb import keys_cli, versions_cli
from ragkb.client import FINAL_STATES, RagkbApiError, RagkbClient, iter_files
from shared.config import Settings


def _settings() -> Settings:
    return Settings.from_env()


def _pid_file(settings: Settings) -> Path:
    return settings.data_dir / "ragkb.pid"


def _running_pid(settings: Settings) -> int | None:
    try:
        pid = int(_pid_file(settings).read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None


def cmd_up(args) -> int:
    settings = _settings()
    client = RagkbClient(args.url)
    if _running_pid(settings):
        print(f"ragkb is already running (pid {_running_pid(settings)}) at {client.base_url}")
        return 0
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if args.foreground:
        from ragkb.embedded import main as run_embedded

        run_embedded()
        return 0
    log_path = settings.data_dir / "ragkb.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "ragkb.embedded"], stdout=log, stderr=log,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    _pid_file(settings).write_text(str(process.pid))
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            print(f"ragkb failed to start (exit {process.returncode}); last log lines from {log_path}:",
                  file=sys.stderr)
            print("\n".join(log_path.read_text(errors="replace").splitlines()[-20:]), file=sys.stderr)
            return 1
        try:
            if client.health().get("ready"):
                print(f"ragkb is up (pid {process.pid}): REST {client.base_url}, data in {settings.data_dir}")
                return 0
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    print(f"ragkb did not become ready within {args.timeout}s; see {log_path}", file=sys.stderr)
    return 1


def cmd_down(args) -> int:
    settings = _settings()
    pid = _running_pid(settings)
    if pid is None:
        print("ragkb is not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    for _ in range(300):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    _pid_file(settings).unlink(missing_ok=True)
    print(f"ragkb stopped (pid {pid})")
    return 0


def cmd_status(args) -> int:
    client = RagkbClient(args.url)
    try:
        health = client.health()
    except httpx.TransportError:
        print(f"ragkb is not reachable at {client.base_url}")
        return 1
    print(f"gateway {client.base_url}: {'ready' if health['ready'] else 'NOT ready'}")
    for name, state in health["services"].items():
        print(f"  {name:<10} {state}")
    for kb in client.list_kbs() if health["ready"] else []:
        print(f"  kb {kb['name']}: {kb['document_count']} documents, {kb['chunk_count']} chunks "
              f"({kb['embedding_model']})")
    return 0 if health["ready"] else 1


def cmd_stack(args) -> int:
    """`ragkb stack up|down`: the local multi-process stack of scripts/local_stack.py (a source checkout)."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "local_stack.py"
    if not script.is_file():
        print(f"the local stack needs a source checkout; {script} is missing", file=sys.stderr)
        return 2
    command = [sys.executable, str(script), args.action, "--dir", args.dir, "--timeout", str(args.timeout)]
    if args.action == "up":
        command += ["--workers", str(args.workers)] + (["--replicas", args.replicas] if args.replicas else []) \
            + (["--foreground"] if args.foreground else [])
    return subprocess.call(command)


def cmd_kb_create(args) -> int:
    config = Path(args.config).read_text(encoding="utf-8") if args.config else ""
    kb = RagkbClient(args.url).create_kb(args.name, description=args.description, config_yaml=config)
    print(f"created knowledge base {kb['name']} ({kb['embedding_model']})")
    return 0


def cmd_kb_list(args) -> int:
    for kb in RagkbClient(args.url).list_kbs():
        print(f"{kb['name']}\t{kb['document_count']} documents\t{kb['chunk_count']} chunks\t{kb['description']}")
    return 0


def cmd_ingest(args) -> int:
    client = RagkbClient(args.url)
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        print(f"no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        client.get_kb(args.kb)
    except RagkbApiError as error:
        if error.status != 404 or args.no_create:
            raise
        client.create_kb(args.kb)
        print(f"created knowledge base {args.kb}")
    files = [entry for path in args.paths for entry in iter_files(Path(path))]
    failures: list[tuple[str, str]] = []
    outcomes: dict[str, int] = {}
    jobs = []
    with tqdm(total=len(files), desc=f"ingest -> {args.kb}", unit="file") as bar:
        for path, name in files:
            try:
                jobs.append(client.upload(args.kb, name, path.read_bytes(), namespace=args.namespace)["job_id"])
            except RagkbApiError as error:
                failures.append((name, error.message))
                bar.update(1)

        def finished(job: dict) -> None:
            if job["state"] == "done":
                outcomes[job["outcome"]] = outcomes.get(job["outcome"], 0) + 1
            else:
                failures.append((job["filename"], job["error"] or job["state"]))
            bar.set_postfix_str(job["filename"][-40:])
            bar.update(1)

        client.wait(jobs, on_final=finished)
    done = sum(outcomes.values())
    print(f"{done} ingested ({', '.join(f'{n} {k}' for k, n in sorted(outcomes.items())) or 'none'}), "
          f"{len(failures)} failed")
    for name, reason in failures:
        print(f"  FAILED {name}: {reason}")
    return 1 if failures and not done else 0


def cmd_ask(args) -> int:
    result = RagkbClient(args.url).query(args.kb, args.question, namespaces=args.namespace or None, top_k=args.top_k)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    print(result["answer"])
    if result["citations"]:
        print("\nSources:")
        shown = set()
        for citation in result["citations"]:
            if citation["number"] in shown:
                continue
            shown.add(citation["number"])
            path = " > ".join(citation["heading_path"]) or "(no heading)"
            print(f"  [{citation['number']}] {citation['doc_id']} — {path}")
    for issue in result["citation_issues"]:
        print(f"  citation {issue['marker']}: {issue['reason']} ({issue['action']})")
    answerability = result.get("answerability") or {}
    if answerability:
        print(f"\nEvidence {answerability.get('evidence_score', 0.0):.2f}, {answerability.get('decision', '')}: "
              f"{answerability.get('reason', '')}")
    if result["degraded"]:
        print(f"\nDegraded routes: {', '.join(result['degraded'])}")
    timings = ", ".join(f"{name} {stage['ms']:.1f} ms" for name, stage in result["stages"].items())
    print(f"\nStages: {timings}")
    return 0


def cmd_docs_list(args) -> int:
    for doc in RagkbClient(args.url).list_documents(args.kb, args.namespace):
        print(f"{doc['namespace']}\t{doc['doc_id']}\tv{doc['version']}\t{doc['chunk_count']} chunks\t{doc['updated_at']}")
    return 0


def cmd_docs_delete(args) -> int:
    result = RagkbClient(args.url).delete_document(args.kb, args.doc_id, namespace=args.namespace)
    print(f"deleted {args.doc_id}: {result['chunks_deleted']} chunks removed")
    return 0


def cmd_certs_init(args) -> int:
    from shared.tls import init_certs

    if args.if_missing and (Path(args.directory) / "ca.pem").exists():
        print(f"{args.directory} has a CA already; nothing to do")
        return 0
    try:
        written = init_certs(args.directory, hosts=args.host, days=args.days, force=args.force)
    except FileExistsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} files to {args.directory}; serve with RAGKB_TLS_DIR={Path(args.directory).resolve()}")
    return 0


def cmd_eval(args) -> int:
    from ragkb.eval import format_table, run_eval
    from shared.errors import RagkbError
    from shared.profiles import profiles_path

    try:
        profiles = profiles_path(Settings.from_env())
        operator_profiles = profiles if profiles.exists() else None  # none: the built-in profiles
        config = Path(args.kb_config).read_text(encoding="utf-8") if args.kb_config else ""
        results = run_eval(Path(args.dataset), args.split, kb_config_yaml=config, limit_docs=args.limit_docs,
                           cache_path=Path(args.cache) if args.cache else None, tune_split=args.tune_split,
                           limit_queries=args.limit_queries, profiles_file=operator_profiles,
                           runs_path=Path(args.runs) if args.runs else None)
    except (OSError, RagkbError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(format_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def cmd_kb_configure(args) -> int:
    from ragkb.gate import configure_kb
    from shared.errors import RagkbError

    try:
        report = configure_kb(_settings(), args.kb, Path(args.config).read_text(encoding="utf-8"),
                              args.namespace or ["default"], force=args.force)
    except (OSError, RagkbError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


def cmd_tune(args) -> int:
    from ragkb.tune import tune_kb
    from shared.errors import RagkbError

    try:
        report = tune_kb(_settings(), args.kb, Path(args.questions), args.namespace or ["default"], force=args.force)
    except (OSError, RagkbError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, ensure_ascii=False))
    if not report["stored"]:
        print("not stored: the fitted fusion is worse than the current one on the unseen part (--force stores it)",
              file=sys.stderr)
        return 2
    return 0


def cmd_eval_answers(args) -> int:
    from ragkb import eval_answers
    from shared.errors import RagkbError

    try:
        outcomes = eval_answers.run(args.kb, Path(args.questions), Path(args.corpus) if args.corpus else None,
                                    limit=args.limit, progress=not args.json)
    except (OSError, RagkbError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    results = eval_answers.report(outcomes)
    if args.json:
        document = {"parts": results, "questions": eval_answers.outcomes_json(outcomes)}
        if args.sweep:
            document["sweep"] = {part: eval_answers.sweep([o for o in outcomes if o.part == part])
                                 for part in eval_answers.PARTS}
        print(json.dumps(document, ensure_ascii=False, indent=2))
        return 0
    print(eval_answers.format_report(results))
    if args.sweep:
        for part in eval_answers.PARTS:
            print(f"\nsweep ({part} part)")
            print(eval_answers.format_sweep(eval_answers.sweep([o for o in outcomes if o.part == part])))
    return 0


def cmd_calibrate(args) -> int:
    from ragkb import eval_answers
    from shared.errors import RagkbError

    try:
        models = eval_answers.calibrate(args.kb, Path(args.questions), Path(args.corpus) if args.corpus else None,
                                        target_answer_rate=args.target_answer_rate, limit=args.limit)
    except (OSError, ValueError, RagkbError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for language, model in models.items():
        weights = ", ".join(f"{f}={w:+.3f}" for f, w in zip(model["features"], model["weights"]))
        print(f"{language}: threshold {model['threshold']:.4f}, bias {model['bias']:+.3f}, {weights}")
    print(f"stored in the config of knowledge base {args.kb} (generator.answerability)")
    return 0


def _job_line(job: dict) -> str:
    progress = f"{job['chunks_done']}/{job['chunks_total']}" if job["chunks_total"] else "-"
    reason = f"  {job['error']}" if job["error"] else ""
    return (f"{job['job_id'][:12]}  {job['namespace']:<12} {job['state']:<10} {progress:>9}  "
            f"{job['filename']}{reason}")


def cmd_jobs(args) -> int:
    client = RagkbClient(args.url)
    if args.cancel or args.retry:
        job = client.cancel_job(args.cancel) if args.cancel else client.retry_job(args.retry)
        print(_job_line(job))
        return 0
    if not args.kb:
        print("ragkb jobs needs --kb (or --cancel/--retry JOB)", file=sys.stderr)
        return 2
    jobs = client.list_jobs(args.kb, namespace=args.namespace, limit=args.limit)
    if not args.watch:
        for job in jobs:
            print(_job_line(job))
        return 0
    return _watch_jobs(client, args, jobs)


def _watch_jobs(client: RagkbClient, args, jobs: list[dict]) -> int:
    """One progress bar per active job (chunks done / total) until none is active."""
    bars: dict[str, tqdm] = {}
    try:
        while True:
            active = [job for job in jobs if job["state"] not in FINAL_STATES]
            for job in jobs:
                if job["job_id"] not in bars and job["state"] not in FINAL_STATES:
                    bars[job["job_id"]] = tqdm(total=max(job["chunks_total"], 1), unit="chunk", leave=True,
                                               position=len(bars), desc=job["filename"][-32:])
                bar = bars.get(job["job_id"])
                if bar is not None:
                    bar.total = max(job["chunks_total"], 1)
                    bar.n = job["chunks_done"]
                    bar.set_postfix_str(job["state"] if not job["error"] else f"{job['state']}: {job['error'][:60]}")
            if not active:
                return 0
            time.sleep(args.interval)
            jobs = client.list_jobs(args.kb, namespace=args.namespace, limit=args.limit)
    finally:
        for bar in bars.values():
            bar.close()


def cmd_sync(args) -> int:
    from ragkb.folder import ManifestError, scan

    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"not a folder: {folder}", file=sys.stderr)
        return 2
    try:
        files = scan(folder)
    except ManifestError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    client = RagkbClient(args.url)
    plan = client.sync(args.kb, [f.entry() for f in files], namespace=args.namespace, dry_run=args.dry_run)
    if args.dry_run:
        print(f"would upload {len(plan['upload'])} ({len(plan['moved'])} moved), keep {len(plan['unchanged'])}, "
              f"delete {len(plan['deleted'])}")
        return 0
    by_id = {f.doc_id: f for f in files}
    failures: list[tuple[str, str]] = []
    jobs = []
    for doc_id in plan["upload"]:
        file = by_id[doc_id]
        try:
            jobs.append(client.upload(args.kb, file.source_uri, file.path.read_bytes(), namespace=args.namespace,
                                      doc_id=doc_id)["job_id"])
        except RagkbApiError as error:
            failures.append((file.source_uri, error.message))
    outcomes: dict[str, int] = {}
    with tqdm(total=len(jobs), desc=f"sync -> {args.kb}", unit="file") as bar:
        def finished(job: dict) -> None:
            if job["state"] == "done":
                outcomes[job["outcome"]] = outcomes.get(job["outcome"], 0) + 1
            else:
                failures.append((job["filename"], job["error"] or job["state"]))
            bar.update(1)

        client.wait(jobs, on_final=finished)
    written = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())) or "none"
    print(f"{sum(outcomes.values())} synced ({written}), {len(plan['moved'])} moved, "
          f"{len(plan['unchanged'])} unchanged, {len(plan['deleted'])} deleted, {len(failures)} failed")
    for name, reason in failures:
        print(f"  FAILED {name}: {reason}")
    return 1 if failures else 0


def cmd_reconcile(args) -> int:
    report = RagkbClient(args.url).reconcile(args.kb, namespace=args.namespace, dry_run=args.dry_run)
    print(f"{report['kb']}: {report['documents_checked']} documents, {report['chunks_checked']} chunks checked, "
          f"{len(report['repairs'])} {'to repair' if args.dry_run else 'repaired'}")
    for repair in report["repairs"]:
        print(f"  {repair['namespace']}/{repair['doc_id']}: {repair['action']} (keyword +{repair['restored_keyword']}, "
              f"vector +{repair['restored_vector']}, strays -{repair['strays_deleted']}, "
              f"unrecoverable {repair['unrecoverable']})")
    for skipped in report["skipped"]:
        print(f"  skipped {skipped}")
    return 0


def cmd_mcp(args) -> int:
    from ragkb.mcp_server import serve  # the mcp SDK is an optional extra: ragkb[mcp]

    serve(transport=args.transport, base_url=args.url, api_key=args.api_key, host=args.host, port=args.port)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragkb", description="RAG knowledge infrastructure")
    parser.add_argument("--url", default=None, help="gateway REST URL (default $RAGKB_URL or http://127.0.0.1:8780)")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start the embedded stack in the background")
    up.add_argument("--foreground", action="store_true", help="run in this terminal until Ctrl-C")
    up.add_argument("--timeout", type=float, default=300, help="seconds to wait for readiness")
    up.set_defaults(func=cmd_up)
    commands.add_parser("down", help="stop the embedded stack").set_defaults(func=cmd_down)
    commands.add_parser("status", help="health of every service and the knowledge bases").set_defaults(
        func=cmd_status)

    stack = commands.add_parser("stack", help="every service its own process, with Redis, Elasticsearch, Milvus")
    stack.add_argument("action", choices=["up", "down"])
    stack.add_argument("--dir", default=str(Path.home() / ".ragkb-stack"), help="data, logs and state of the stack")
    stack.add_argument("--workers", type=int, default=1, help="Celery worker processes")
    stack.add_argument("--replicas", default="", metavar="NAME=N,...",
                       help="processes of the gateway and of each layer, e.g. gateway=2,indexer=2,retriever=3")
    stack.add_argument("--foreground", action="store_true", help="up: stay attached; Ctrl-C stops everything")
    stack.add_argument("--timeout", type=float, default=600, help="seconds to wait for readiness (or for down)")
    stack.set_defaults(func=cmd_stack)

    kb = commands.add_parser("kb", help="knowledge bases").add_subparsers(dest="kb_command", required=True)
    create = kb.add_parser("create", help="create a knowledge base")
    create.add_argument("name")
    create.add_argument("--description", default="")
    create.add_argument("--config", help="YAML file with config overrides")
    create.set_defaults(func=cmd_kb_create)
    kb.add_parser("list", help="list knowledge bases").set_defaults(func=cmd_kb_list)
    configure = kb.add_parser("configure", help="replace a KB's config; retriever changes are gated on its golden "
                                                "questions (retriever.golden_questions)")
    configure.add_argument("--kb", required=True)
    configure.add_argument("--config", required=True, help="the whole KB config as YAML")
    configure.add_argument("--namespace", action="append", help="namespace(s) the golden questions search")
    configure.add_argument("--force", action="store_true", help="store it even when nDCG@10 drops too far")
    configure.set_defaults(func=cmd_kb_configure)
    versions_cli.add_commands(kb)

    ingest = commands.add_parser("ingest", help="ingest files or folders (recursive)")
    ingest.add_argument("paths", nargs="+", metavar="PATH")
    ingest.add_argument("--kb", required=True)
    ingest.add_argument("--namespace", default="")
    ingest.add_argument("--no-create", action="store_true", help="fail if the knowledge base does not exist")
    ingest.set_defaults(func=cmd_ingest)

    ask = commands.add_parser("ask", help="ask a question; prints the cited answer")
    ask.add_argument("question")
    ask.add_argument("--kb", required=True)
    ask.add_argument("--namespace", action="append", help="namespace to search (repeatable)")
    ask.add_argument("--top-k", type=int, default=0)
    ask.add_argument("--json", action="store_true", help="print the full response")
    ask.set_defaults(func=cmd_ask)

    mcp = commands.add_parser("mcp", help="serve the knowledge bases to MCP clients (list_kbs, search, ask)")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                     help="stdio (default), or streamable HTTP at http://HOST:PORT/mcp")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP address to listen on")
    mcp.add_argument("--port", type=int, default=8790, help="HTTP port")
    mcp.add_argument("--api-key", default=None,
                     help="key for calls that bring none (default $RAGKB_API_KEY); over HTTP each request's "
                          "own 'Authorization: Bearer' key is used")
    mcp.set_defaults(func=cmd_mcp)

    docs = commands.add_parser("docs", help="documents").add_subparsers(dest="docs_command", required=True)
    listing = docs.add_parser("list")
    listing.add_argument("--kb", required=True)
    listing.add_argument("--namespace", default="")
    listing.set_defaults(func=cmd_docs_list)
    delete = docs.add_parser("delete")
    delete.add_argument("doc_id")
    delete.add_argument("--kb", required=True)
    delete.add_argument("--namespace", default="")
    delete.set_defaults(func=cmd_docs_delete)

    jobs = commands.add_parser("jobs", help="ingestion jobs of a knowledge base; --watch shows live progress")
    jobs.add_argument("--kb")
    jobs.add_argument("--namespace", default="")
    jobs.add_argument("--limit", type=int, default=100)
    jobs.add_argument("--watch", action="store_true", help="progress bars until no job is active")
    jobs.add_argument("--interval", type=float, default=0.5, help="seconds between refreshes with --watch")
    jobs.add_argument("--cancel", metavar="JOB", help="cancel a queued or running job")
    jobs.add_argument("--retry", metavar="JOB", help="run a failed or cancelled job again")
    jobs.set_defaults(func=cmd_jobs)

    sync = commands.add_parser("sync", help="make a namespace mirror a folder (added, changed, moved, deleted)")
    sync.add_argument("folder")
    sync.add_argument("--kb", required=True)
    sync.add_argument("--namespace", default="")
    sync.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    sync.set_defaults(func=cmd_sync)

    reconcile = commands.add_parser("reconcile", help="check the registry against both stores and repair")
    reconcile.add_argument("--kb", required=True)
    reconcile.add_argument("--namespace", default="")
    reconcile.add_argument("--dry-run", action="store_true", help="report divergence, change nothing")
    reconcile.set_defaults(func=cmd_reconcile)

    evaluate = commands.add_parser("eval", help="retrieval quality (nDCG, recall, MRR, latency) on a BEIR dataset")
    evaluate.add_argument("--dataset", required=True, help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--kb-config", help="KB YAML naming the stores and embedder (default: embedded engines)")
    evaluate.add_argument("--limit-docs", type=int, default=0, help="index at most N documents (judged ones first)")
    evaluate.add_argument("--cache", help="document-vector cache file (default ~/.cache/ragkb/eval-vectors.sqlite)")
    evaluate.add_argument("--json", help="also write the metrics to this file")
    evaluate.add_argument("--limit-queries", type=int, default=0,
                          help="run at most N queries of each split (a stable sample by query id)")
    evaluate.add_argument("--tune-split", default="", help="fit the fusion on this split first (e.g. train)")
    evaluate.add_argument("--runs", help="also write every query's route lists to this JSON-lines file (.gz: "
                                         "compressed), for scripts/bench/fusion_replay.py")
    evaluate.set_defaults(func=cmd_eval)

    tune = commands.add_parser("tune", help="fit a KB's fusion on judged questions and store it in the KB config")
    tune.add_argument("--kb", required=True)
    tune.add_argument("--questions", required=True,
                      help='JSON lines {"query": ..., "relevant": [doc ids]}; 30%% are kept unseen')
    tune.add_argument("--namespace", action="append", help="namespace(s) searched (default: default)")
    tune.add_argument("--force", action="store_true", help="store the fit even when the unseen part gets worse")
    tune.set_defaults(func=cmd_tune)
    answers = commands.add_parser("eval-answers", help="answer quality: answer/refusal rates, citations, F1, AUC")
    calibrate = commands.add_parser("calibrate", help="fit the answerability model of a KB on labelled questions")
    for command in (answers, calibrate):
        command.add_argument("--kb", required=True, help="knowledge base (its config; its documents without --corpus)")
        command.add_argument("--questions", required=True, help="JSONL: id, question, answerable, gold_doc_ids, "
                                                                "gold_answers, language")
        command.add_argument("--corpus", help="JSONL documents to index into a temporary copy of the KB")
        command.add_argument("--limit", type=int, default=0, help="the first N questions only")
    answers.add_argument("--sweep", action="store_true", help="answer/refusal trade-off over thresholds")
    answers.add_argument("--json", action="store_true", help="print JSON (metrics per part, per question)")
    answers.set_defaults(func=cmd_eval_answers)
    calibrate.add_argument("--target-answer-rate", type=float, default=0.9,
                           help="share of answerable questions the threshold keeps answering")
    calibrate.set_defaults(func=cmd_calibrate)
    keys_cli.add_commands(commands)
    certs = commands.add_parser("certs", help="mTLS certificates for the services").add_subparsers(
        dest="certs_command", required=True)
    init = certs.add_parser("init", help="a development CA and one certificate per service (RAGKB_TLS_DIR)")
    init.add_argument("directory")
    init.add_argument("--host", action="append", default=[], help="extra DNS name or IP for every certificate")
    init.add_argument("--days", type=int, default=365)
    init.add_argument("--force", action="store_true", help="replace existing certificates (rotation)")
    init.add_argument("--if-missing", action="store_true", help="do nothing when the directory has a CA already")
    init.set_defaults(func=cmd_certs_init)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RagkbApiError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except httpx.TransportError as error:
        print(f"error: cannot reach the gateway ({error}); is `ragkb up` running?", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
