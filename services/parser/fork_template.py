"""Imported once by the parse workers' fork server (isolation.py), never by the parser service itself.

It imports the readers' libraries (unstructured, spaCy, the language profiles) and reads a few words of plain text,
the warm-up each worker used to do on its own, so that every worker forked from the server starts with all of that
in place. Nothing here starts a thread of its own, so a fork inherits no lock held by one; the one library
thread pool the imports can start (numpy's OpenBLAS, unless OPENBLAS_NUM_THREADS=1) stops itself around
each fork and starts again in the child on first use.
"""

from __future__ import annotations

import logging

from services.parser import formats, reading
from services.parser.isolation import WARM_UP_TEXT

try:
    reading.preload(formats.TEXT)
    formats.read("warm-up.txt", WARM_UP_TEXT, formats.ReadOptions())
except Exception:  # the fork server must come up regardless: its workers then warm up on their first file
    logging.getLogger("ragkb.parser").exception("the parse workers' fork server did not warm up")
