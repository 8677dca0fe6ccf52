"""`ragkb keys ...`: manage API keys on the server, e.g. the first admin key before auth is on.

Keys go to the keys file, or to the control-plane database when RAGKB_DATABASE_URL is set (cluster mode).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from services.gateway.auth import ROLES, KeyStore, key_store_for
from shared.config import Settings
from shared.errors import RagkbError


def add_commands(commands) -> None:
    keys = commands.add_parser("keys", help="API keys (in the keys file, or the control-plane database with "
                                                 "RAGKB_DATABASE_URL; gateways see changes at the next request)")
    keys.add_argument("--keys-file", help="default: the database (RAGKB_DATABASE_URL), else RAGKB_KEYS_FILE or "
                                          "<data dir>/keys.yaml")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser("create", help="create a key and print it (shown only once)")
    create.add_argument("name")
    create.add_argument("--role", required=True, choices=list(ROLES))
    create.add_argument("--namespace", action="append", required=True, help="repeatable; '*' = all namespaces")
    create.add_argument("--group", action="append", default=[], help="document ACL group; repeatable; '*' = all")
    create.set_defaults(func=_reported(cmd_create))
    listing = actions.add_parser("list", help="keys without their hashes")
    listing.set_defaults(func=_reported(cmd_list))
    delete = actions.add_parser("delete", help="revoke a key")
    delete.add_argument("name")
    delete.set_defaults(func=_reported(cmd_delete))


def _reported(command):
    """Errors of the keys file (bad role, duplicate name, unreadable file) as one line, exit status 1."""
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except RagkbError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return run


def _store(args: argparse.Namespace) -> KeyStore:
    return KeyStore(Path(args.keys_file)) if args.keys_file else key_store_for(Settings.from_env())


def cmd_create(args: argparse.Namespace) -> int:
    raw = _store(args).create(args.name, role=args.role, namespaces=args.namespace, groups=args.group)
    print(raw)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for entry in _store(args).list():
        print(f"{entry['name']:<24} {entry['role']:<7} namespaces={','.join(entry['namespaces'])} "
              f"groups={','.join(entry['groups']) or '-'}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    _store(args).delete(args.name)
    print(f"deleted {args.name}")
    return 0
