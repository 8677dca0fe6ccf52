"""Legacy binary Office files (.doc, .xls, .ppt) -> their OOXML form through headless LibreOffice.

The converted bytes are then read by the DOCX / XLSX / PPTX readers, so the legacy formats get
the same structure (heading styles, tables, slides, sheets) and the same limits. Each
conversion runs `soffice` with a profile directory of its own (two conversions at once must
not share one) and a time limit; an encrypted file or one LibreOffice cannot open is refused
naming the problem.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from services.parser import errors, formats

CONVERT_TIMEOUT_S = 120.0
TARGETS = {"doc": "docx", "xls": "xlsx", "ppt": "pptx"}
_ENCRYPTED_MARKERS = (b"E\x00n\x00c\x00r\x00y\x00p\x00t\x00e\x00d\x00P\x00a\x00c\x00k\x00a\x00g\x00e",)


def soffice() -> str:
    found = shutil.which("soffice") or shutil.which("libreoffice")
    if not found:
        raise errors.ParseError(errors.UNSUPPORTED_TYPE,
                                "legacy Office files (.doc, .xls, .ppt) need LibreOffice on the parser host "
                                "(Debian: libreoffice-writer-nogui, libreoffice-calc-nogui, libreoffice-impress-nogui)")
    return found


def convert(filename: str, doc_type: str, data: bytes) -> bytes:
    """The file converted to its OOXML counterpart (doc -> docx, xls -> xlsx, ppt -> pptx)."""
    target = TARGETS[doc_type]
    if not data.startswith(formats.OLE_MAGIC):
        raise errors.ParseError(errors.CORRUPT, f"{filename!r} could not be read as a legacy {doc_type.upper()} "
                                                "file (not an OLE compound file)")
    if any(marker in data for marker in _ENCRYPTED_MARKERS):
        raise errors.ParseError(errors.PASSWORD_PROTECTED,
                                f"{filename!r} is password-protected; remove the password and upload it again")
    program = soffice()
    with tempfile.TemporaryDirectory(prefix="ragkb-soffice-") as folder:
        source = Path(folder) / f"input.{doc_type}"
        source.write_bytes(data)
        profile = Path(folder, "profile").as_uri()
        command = [program, f"-env:UserInstallation={profile}", "--headless", "--norestore", "--nologo",
                   "--convert-to", target, "--outdir", folder, str(source)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S,
                                  env={**os.environ, "HOME": folder})
        except subprocess.TimeoutExpired:
            raise errors.ParseError(errors.TIMEOUT, f"LibreOffice took longer than {CONVERT_TIMEOUT_S:g} s to "
                                                    f"convert {filename!r}") from None
        converted = Path(folder) / f"input.{target}"
        if not converted.exists():
            detail = (done.stderr or done.stdout).strip()[-200:]
            raise errors.ParseError(errors.CORRUPT, f"{filename!r} could not be read as a legacy {doc_type.upper()} "
                                                    f"file (LibreOffice: {detail or 'no output'})")
        return converted.read_bytes()
