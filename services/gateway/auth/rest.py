"""REST side of tenants and keys: the authentication dependency and the admin API for keys."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from services.gateway import auth
from shared.errors import PermissionDenied

# Probes, scrapers and the test bench page itself need no key; the page sends one with its API calls.
OPEN_PATHS = frozenset({"/healthz", "/metrics", "/debug", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


async def authenticate(request: Request) -> None:
    """Router-level dependency: resolve the caller, check the role the route needs, make it current."""
    path = request.url.path
    if path in OPEN_PATHS or path.startswith("/debug/"):
        return
    gateway = request.app.state.gateway
    try:
        principal = gateway.keys.authenticate(token_of(request.headers),
                                              loopback_peer=auth.is_loopback_peer(request.client and request.client.host))
        principal.require(auth.required_role(request.method, path))
    except (auth.Unauthenticated, auth.PermissionDenied) as error:
        metrics = gateway.runtime.metrics
        if metrics is not None:
            metrics.auth_failures.labels(type(error).__name__).inc()
        raise
    request.state.principal = principal
    auth.use(principal)


def token_of(headers) -> str | None:
    header = headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return headers.get("x-api-key") or None


class CreateKey(BaseModel):
    name: str = Field(description="1-64 letters, digits, '.', '-' or '_'")
    role: str = Field(description="reader, writer, kb_admin or admin")
    namespaces: list[str] = Field(description="namespaces the key may use; ['*'] = all")
    groups: list[str] = Field(default_factory=list, description="document ACL groups; ['*'] = ignore ACLs")


router = APIRouter(prefix="/v1/admin/keys", tags=["admin"])


@router.get("")
def list_keys(request: Request):
    """Keys without their hashes (an admin key is needed once keys exist; loopback only before)."""
    keys = request.app.state.gateway.keys
    return {"auth_enabled": keys.enabled, "keys": keys.list()}


@router.post("", status_code=201)
def create_key(body: CreateKey, request: Request):
    """Create a key with an admin key; the raw key is in this response only. The first key is created on
    the server with `ragkb keys create` (or written to the keys file), never over the API."""
    keys = request.app.state.gateway.keys
    if not keys.enabled:
        raise PermissionDenied("no key exists yet: create the first admin key on the server with "
                               "`ragkb keys create NAME --role admin --namespace '*'`")
    raw = keys.create(body.name, role=body.role, namespaces=body.namespaces, groups=body.groups)
    return {"name": body.name, "key": raw, "role": body.role, "namespaces": body.namespaces, "groups": body.groups}


@router.delete("/{name}")
def delete_key(name: str, request: Request):
    request.app.state.gateway.keys.delete(name)
    return {"deleted": name}
