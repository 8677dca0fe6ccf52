"""`ragkb kb versions|version|switch|rollback|drop-version`: blue-green versions of a knowledge base, through
the gateway's REST API (shared/kb_versions.py has the states)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ragkb.client import RagkbClient


def _line(version: dict) -> str:
    progress = f"{version['docs_done']}/{version['docs_total']} documents"
    outcome = version["decision"].get("outcome", "")
    extra = f"\tgate: {outcome}" if outcome else ""
    extra += f"\terror: {version['error']}" if version["error"] else ""
    return f"v{version['version']}\t{version['state']}\t{progress}\t{version['updated_at']}{extra}"


def cmd_versions(args) -> int:
    for version in RagkbClient(args.url).list_versions(args.kb):
        print(_line(version))
    return 0


def cmd_show(args) -> int:
    print(json.dumps(RagkbClient(args.url).get_version(args.kb, args.version), indent=2, ensure_ascii=False))
    return 0


def cmd_create(args) -> int:
    client = RagkbClient(args.url)
    version = client.create_version(args.kb, Path(args.config).read_text(encoding="utf-8"))
    print(f"version {version['version']} of {args.kb} is building")
    if not args.wait:
        return 0
    while version["state"] == "building":
        time.sleep(1.0)
        version = client.get_version(args.kb, version["version"])
        print(f"\r{version['docs_done']}/{version['docs_total']} documents", end="", flush=True)
    print()
    print(_line(version))
    return 0 if version["state"] == "ready" else 1


def cmd_switch(args) -> int:
    version = RagkbClient(args.url).switch_version(args.kb, args.version, force=args.force,
                                                   namespaces=args.namespace or [])
    print(_line(version))
    decision = version["decision"]
    if decision.get("gated"):
        print(f"nDCG@10 {decision['before']['hybrid']:.4f} (v{decision['before']['version']}) -> "
              f"{decision['after']['hybrid']:.4f} (v{decision['after']['version']})"
              f"{' (forced)' if decision['forced'] else ''}")
    return 0


def cmd_rollback(args) -> int:
    print(_line(RagkbClient(args.url).rollback(args.kb, to=args.to or 0)))
    return 0


def cmd_drop(args) -> int:
    print(_line(RagkbClient(args.url).drop_version(args.kb, args.version)))
    return 0


def add_commands(kb: argparse._SubParsersAction) -> None:
    """Add the version commands to `ragkb kb`."""
    listing = kb.add_parser("versions", help="a knowledge base's versions: state, re-index progress, gate")
    listing.add_argument("kb")
    listing.set_defaults(func=cmd_versions)
    version = kb.add_parser("version", help="create or show a version").add_subparsers(dest="version_command",
                                                                                       required=True)
    create = version.add_parser("create", help="a new version with other chunker, embedder or store settings, "
                                               "re-indexed in the background from the stored chunks")
    create.add_argument("kb")
    create.add_argument("--config", required=True,
                        help="YAML with the sections to change: chunker, chunker_rules, embedder, keyword_store, "
                             "vector_store")
    create.add_argument("--wait", action="store_true", help="show progress until the build has finished")
    create.set_defaults(func=cmd_create)
    show = version.add_parser("show", help="one version, with its gate decision and config")
    show.add_argument("kb")
    show.add_argument("version", type=int)
    show.set_defaults(func=cmd_show)
    switch = kb.add_parser("switch", help="make a ready version live, if the golden questions do not get worse")
    switch.add_argument("kb")
    switch.add_argument("version", type=int)
    switch.add_argument("--force", action="store_true", help="switch even when the gate refuses")
    switch.add_argument("--namespace", action="append", help="namespace(s) the golden questions search")
    switch.set_defaults(func=cmd_switch)
    rollback = kb.add_parser("rollback", help="back to a retired version at once (no re-index)")
    rollback.add_argument("kb")
    rollback.add_argument("--to", type=int, help="the version (default: the one retired last)")
    rollback.set_defaults(func=cmd_rollback)
    drop = kb.add_parser("drop-version", help="delete a ready, retired or failed version's index")
    drop.add_argument("kb")
    drop.add_argument("version", type=int)
    drop.set_defaults(func=cmd_drop)
