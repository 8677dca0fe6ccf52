"""The retrieval test bench at /debug: plain HTML + a little JS over the public REST API, no build step."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC = Path(__file__).with_name("static")
router = APIRouter(include_in_schema=False)


@router.get("/debug")
def debug_page():
    return FileResponse(STATIC / "debug.html", media_type="text/html; charset=utf-8")


@router.get("/debug/debug.js")
def debug_script():
    return FileResponse(STATIC / "debug.js", media_type="text/javascript; charset=utf-8")
