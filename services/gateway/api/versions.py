"""REST routes of knowledge-base versions (blue-green re-indexing); the indexer owns versions and checks
that a change comes from a kb_admin key over every namespace."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field

from shared.config import MAX_INDEX_VERSION
from shared.contracts import indexer_pb2

router = APIRouter(tags=["versions"])
VersionNumber = Annotated[int, Path(ge=1, le=MAX_INDEX_VERSION)]


class CreateVersionBody(BaseModel):
    config_yaml: str = Field(max_length=256 * 1024, description="the sections a version sets: chunker, chunker_rules, embedder, "
                                         "keyword_store, vector_store")


class SwitchBody(BaseModel):
    force: bool = Field(False, description="switch even when the golden questions say the version is worse")
    namespaces: list[str] = Field(default_factory=list, description="where the gate measures; empty = ['default']")


class RollbackBody(BaseModel):
    to: int = Field(0, ge=0, le=MAX_INDEX_VERSION, description="a retired version; 0 = the one retired last")


def version_json(version: indexer_pb2.KnowledgeBaseVersion) -> dict:
    return {"kb": version.kb, "version": version.version, "state": version.state,
            "docs_done": version.docs_done, "docs_total": version.docs_total, "error": version.error,
            "decision": json.loads(version.decision_json) if version.decision_json else {},
            "config_yaml": version.config_yaml, "created_at": version.created_at, "updated_at": version.updated_at}


def _indexer(request: Request):
    return request.app.state.gateway.downstream.indexer


@router.get("/v1/knowledge-bases/{kb}/versions")
def list_versions(kb: str, request: Request):
    return {"versions": [version_json(v) for v in _indexer(request).list_versions(kb)]}


@router.post("/v1/knowledge-bases/{kb}/versions", status_code=202)
def create_version(kb: str, body: CreateVersionBody, request: Request):
    """A new version, re-indexed in the background; poll it for progress, then switch to it."""
    return version_json(_indexer(request).create_version(kb, body.config_yaml))


@router.get("/v1/knowledge-bases/{kb}/versions/{version}")
def get_version(kb: str, version: VersionNumber, request: Request):
    return version_json(_indexer(request).get_version(kb, version))


@router.post("/v1/knowledge-bases/{kb}/versions/{version}/switch")
def switch_version(kb: str, version: VersionNumber, body: SwitchBody, request: Request):
    return version_json(_indexer(request).switch_version(kb, version, force=body.force, namespaces=body.namespaces))


@router.post("/v1/knowledge-bases/{kb}/rollback")
def rollback(kb: str, body: RollbackBody, request: Request):
    return version_json(_indexer(request).rollback_version(kb, body.to))


@router.delete("/v1/knowledge-bases/{kb}/versions/{version}")
def drop_version(kb: str, version: VersionNumber, request: Request):
    return version_json(_indexer(request).drop_version(kb, version))
