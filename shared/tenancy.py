"""The tenant context every inner call carries, and how inner services apply it.

The gateway authenticates an API key and turns it into a `TenantContext`
(namespaces, ACL groups, role); the worker builds one for the job it runs. The
typed clients (shared/clients.py) copy the current context into field 100
(`context`) of every inner request. Each inner service runs `TenantInterceptor`:
a request without a tenant is refused, and while the handler runs the tenant is
the current one, so domain code checks namespaces and ACLs against it and calls
it makes downstream (the reranker's part restoration) carry it on.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

import grpc

from shared import kb_settings
from shared.contracts import chunk_pb2
from shared.errors import PermissionDenied, Unauthenticated
from shared.server import SCOPED_PREFIX, run_admitted
from shared.stores.acl import ACL_KEY, parse_groups

CONTEXT_FIELD = "context"
ROLES = ("reader", "writer", "kb_admin", "admin")

_current: contextvars.ContextVar[chunk_pb2.TenantContext | None] = contextvars.ContextVar(
    "ragkb_tenant", default=None)


def current() -> chunk_pb2.TenantContext | None:
    return _current.get()


def require() -> chunk_pb2.TenantContext:
    """The current tenant; inner services call this where they scope data."""
    tenant = _current.get()
    if tenant is None:
        raise Unauthenticated("this call carries no tenant context")
    return tenant


def use(tenant: chunk_pb2.TenantContext) -> contextvars.Token:
    """Make `tenant` current until `reset(token)` (the gateway does this for each authenticated request)."""
    return _current.set(tenant)


def reset(token: contextvars.Token) -> None:
    _current.reset(token)


@contextlib.contextmanager
def acting_for(tenant: chunk_pb2.TenantContext) -> Iterator[chunk_pb2.TenantContext]:
    """Make `tenant` current for the calls made inside the block."""
    token = use(tenant)
    try:
        yield tenant
    finally:
        reset(token)


def operator_tenant(principal: str, *, namespaces: Iterable[str] = ()) -> chunk_pb2.TenantContext:
    """A trusted internal caller: the worker running a job (its namespace), or the reconciler (all)."""
    listed = [ns for ns in namespaces if ns]
    return chunk_pb2.TenantContext(principal=principal, namespaces=listed, all_namespaces=not listed,
                                   role="admin")


def attach(request) -> None:
    """Copy the current tenant into a request that has a `context` field (the typed clients call this)."""
    if CONTEXT_FIELD not in request.DESCRIPTOR.fields_by_name:
        return
    tenant = _current.get()
    if tenant is None:
        request.ClearField(CONTEXT_FIELD)
    else:
        request.context.tenant.CopyFrom(tenant)


def may_access(tenant: chunk_pb2.TenantContext, namespace: str) -> bool:
    return tenant.all_namespaces or namespace in tenant.namespaces


def check_namespaces(namespaces: Iterable[str]) -> list[str]:
    """The namespaces a call names, each within the tenant's; none named = all of the tenant's."""
    tenant = require()
    named = [ns for ns in namespaces if ns]
    outside = sorted({ns for ns in named if not may_access(tenant, ns)})
    if outside:
        raise PermissionDenied(f"{tenant.principal or 'caller'} may not access namespace(s) {', '.join(outside)}")
    if named:
        return named
    if tenant.all_namespaces:
        return []
    return list(tenant.namespaces)


def has_role(role: str) -> bool:
    tenant = require()
    return ROLES.index(tenant.role if tenant.role in ROLES else "reader") >= ROLES.index(role)


def check_role(role: str) -> None:
    if not has_role(role):
        tenant = require()
        raise PermissionDenied(f"{tenant.principal or 'caller'} has role {tenant.role or 'reader'}; "
                               f"this needs {role}")


def scope_filter(search_filter: chunk_pb2.SearchFilter) -> chunk_pb2.SearchFilter:
    """A store filter narrowed to the tenant: its namespaces only, and its ACL groups when it has any."""
    tenant = require()
    scoped = chunk_pb2.SearchFilter()
    scoped.CopyFrom(search_filter)
    namespaces = check_namespaces(search_filter.namespaces)
    if not namespaces:
        raise PermissionDenied("a search must name its namespaces")
    scoped.ClearField("namespaces")
    scoped.namespaces.extend(namespaces)
    if tenant.acl_enforced:
        asked = set(search_filter.acl_groups) if search_filter.acl_enforced else None
        groups = [g for g in tenant.acl_groups if asked is None or g in asked]
        scoped.acl_enforced = True
        scoped.ClearField("acl_groups")
        scoped.acl_groups.extend(groups)
    return scoped


def readable(chunk: chunk_pb2.KnowledgeChunk, tenant: chunk_pb2.TenantContext) -> bool:
    """Whether the tenant may read a chunk: its namespace, and its ACL when the tenant's groups apply."""
    if not may_access(tenant, chunk.namespace):
        return False
    if not tenant.acl_enforced:
        return True
    allowed = parse_groups(chunk.metadata.get(ACL_KEY, ""))
    return not allowed or bool(set(allowed) & set(tenant.acl_groups))


def check_chunks(chunks: Iterable[chunk_pb2.KnowledgeChunk]) -> None:
    """Refuse chunks the tenant may not read (candidates a caller hands to the reranker or generator)."""
    tenant = require()
    for chunk in chunks:
        if not readable(chunk, tenant):
            raise PermissionDenied(f"{tenant.principal or 'caller'} may not read chunk {chunk.chunk_id!r}")


class TenantInterceptor(grpc.ServerInterceptor):
    """Inner services: refuse calls without a tenant, and, with mTLS, callers outside `allowed_peers`.

    `allowed_peers` names the services (certificate common names) that may call;
    None = any peer (plaintext loopback, where there is no certificate to read).
    """

    def __init__(self, service: str, allowed_peers: Iterable[str] | None = None):
        self._service = service
        self._allowed = None if allowed_peers is None else frozenset(allowed_peers)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(SCOPED_PREFIX):
            return handler
        return run_admitted(handler, self._admitted)

    @contextlib.contextmanager
    def _admitted(self, request, context) -> Iterator[None]:
        """The handler runs for the admitted tenant, with the KB settings the call carries current, so the
        calls it makes downstream (the reranker's part restoration) carry both on."""
        with acting_for(self._admit(request, context)), kb_settings.using(kb_settings.carried(request)):
            yield

    def _admit(self, request, context) -> chunk_pb2.TenantContext:
        if self._allowed is not None:
            names = {name.decode() for name in context.auth_context().get("x509_common_name", ())}
            if not names & self._allowed:
                raise PermissionDenied(f"{self._service} does not accept calls from {', '.join(sorted(names)) or 'an unnamed peer'}")
        if CONTEXT_FIELD not in request.DESCRIPTOR.fields_by_name or not request.HasField(CONTEXT_FIELD) \
                or not request.context.HasField("tenant"):
            raise Unauthenticated(f"{self._service}: the call carries no tenant context")
        tenant = request.context.tenant
        if not tenant.all_namespaces and not tenant.namespaces:
            raise Unauthenticated(f"{self._service}: the call's tenant context names no namespace")
        return tenant
