"""Generate the Python contracts (messages, stubs, .pyi) from proto/ into shared/contracts.

The generated modules are committed. `python scripts/gen_protos.py --check` regenerates
into a temporary directory and fails when anything differs, so the committed code can
never drift from the protos (tests run the same check).
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "shared" / "contracts"
PACKAGE_DIR = Path("ragkb") / "v1"
# protoc writes absolute imports ("from ragkb.v1 import x_pb2"); the package lives
# under shared.contracts, so imports are rewritten to that root.
IMPORT_PATTERN = re.compile(r"^from ragkb\.v1 import ", re.MULTILINE)
IMPORT_REPLACEMENT = "from shared.contracts.ragkb.v1 import "


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc

    protos = sorted((PROTO_DIR / PACKAGE_DIR).glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_DIR / PACKAGE_DIR}")
    target = out_dir / PACKAGE_DIR
    target.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(PROTO_DIR)) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for init in (out_dir / "ragkb" / "__init__.py", target / "__init__.py"):
        init.write_text("")
    generated = sorted(p for p in target.iterdir() if p.suffix in {".py", ".pyi"})
    for path in generated:
        path.write_text(IMPORT_PATTERN.sub(IMPORT_REPLACEMENT, path.read_text()))
    return generated


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        committed_dir = OUT_DIR / PACKAGE_DIR
        stale = [
            p.name
            for p in fresh
            if not (committed_dir / p.name).exists() or not filecmp.cmp(p, committed_dir / p.name, shallow=False)
        ]
        extra = sorted(
            p.name
            for p in committed_dir.iterdir()
            if p.suffix in {".py", ".pyi"} and p.name not in {f.name for f in fresh}
        )
    if stale or extra:
        print(f"generated code is out of date: differs={stale} unexpected={extra}; run scripts/gen_protos.py")
        return 1
    print("generated code matches proto/")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed code differs from proto/")
    args = parser.parse_args()
    if args.check:
        return check()
    shutil.rmtree(OUT_DIR / "ragkb", ignore_errors=True)
    for path in generate(OUT_DIR):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
