"""Python client for the gateway's REST API."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx

DEFAULT_URL = "http://127.0.0.1:8780"
FINAL_STATES = {"done", "failed", "cancelled"}


class RagkbApiError(Exception):
    """An error answer from the gateway: HTTP status plus the server's type, message and stage."""

    def __init__(self, status: int, kind: str, message: str, stage: str | None = None):
        super().__init__(f"{status} {kind}: {message}" + (f" (stage: {stage})" if stage else ""))
        self.status, self.kind, self.message, self.stage = status, kind, message, stage


def api_error(response: httpx.Response) -> RagkbApiError:
    """The gateway's error answer (already read) as an exception."""
    body = response.json() if _is_json(response) else {}
    error = body.get("error") or {}
    if not error and "detail" in body:  # FastAPI's own request validation errors
        error = {"type": "ValidationError", "message": str(body["detail"])}
    return RagkbApiError(response.status_code, error.get("type", "HTTPError"),
                         error.get("message", response.text[:500]), error.get("stage"))


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The Authorization header for `api_key`, or for $RAGKB_API_KEY when it is None."""
    api_key = api_key if api_key is not None else os.environ.get("RAGKB_API_KEY", "")
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def default_url() -> str:
    if "RAGKB_URL" in os.environ:
        return os.environ["RAGKB_URL"]
    return f"http://127.0.0.1:{os.environ.get('RAGKB_HTTP_PORT', '8780')}"


class RagkbClient:
    def __init__(self, base_url: str | None = None, *, timeout_s: float = 120.0, api_key: str | None = None):
        self.base_url = base_url or default_url()
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=auth_headers(api_key))

    def _request(self, method: str, path: str, **kwargs) -> dict:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise api_error(response)
        return response.json()

    def health(self) -> dict:
        response = self._http.get("/healthz")
        return response.json()

    def create_kb(self, name: str, *, description: str = "", config_yaml: str = "") -> dict:
        return self._request("POST", "/v1/knowledge-bases",
                             json={"name": name, "description": description, "config_yaml": config_yaml})

    def list_kbs(self) -> list[dict]:
        return self._request("GET", "/v1/knowledge-bases")["knowledge_bases"]

    def get_kb(self, name: str) -> dict:
        return self._request("GET", f"/v1/knowledge-bases/{name}")

    def upload(self, kb: str, filename: str, content: bytes, *, namespace: str = "", doc_id: str = "",
               acl: str = "") -> dict:
        """`acl`: groups allowed to read the document, comma separated (empty = everyone in the namespace)."""
        data = {"namespace": namespace, "doc_id": doc_id, **({"acl": acl} if acl else {})}
        return self._request("POST", f"/v1/knowledge-bases/{kb}/documents", files={"file": (filename, content)},
                             data=data)

    def job(self, job_id: str) -> dict:
        return self._request("GET", f"/v1/jobs/{job_id}")

    def list_jobs(self, kb: str, *, namespace: str = "", limit: int = 100) -> list[dict]:
        return self._request("GET", f"/v1/knowledge-bases/{kb}/jobs",
                             params={"namespace": namespace, "limit": limit})["jobs"]

    def cancel_job(self, job_id: str) -> dict:
        return self._request("POST", f"/v1/jobs/{job_id}/cancel")

    def retry_job(self, job_id: str) -> dict:
        return self._request("POST", f"/v1/jobs/{job_id}/retry")

    def sync(self, kb: str, entries: list[dict], *, namespace: str = "", dry_run: bool = False) -> dict:
        return self._request("POST", f"/v1/knowledge-bases/{kb}/sync",
                             json={"namespace": namespace, "entries": entries, "dry_run": dry_run})

    def reconcile(self, kb: str, *, namespace: str = "", dry_run: bool = False) -> dict:
        return self._request("POST", f"/v1/knowledge-bases/{kb}/reconcile",
                             json={"namespace": namespace, "dry_run": dry_run})

    def list_versions(self, kb: str) -> list[dict]:
        return self._request("GET", f"/v1/knowledge-bases/{kb}/versions")["versions"]

    def get_version(self, kb: str, version: int) -> dict:
        return self._request("GET", f"/v1/knowledge-bases/{kb}/versions/{version}")

    def create_version(self, kb: str, config_yaml: str) -> dict:
        """A new version, re-indexed in the background (state `building`, then `ready` or `failed`)."""
        return self._request("POST", f"/v1/knowledge-bases/{kb}/versions", json={"config_yaml": config_yaml})

    def switch_version(self, kb: str, version: int, *, force: bool = False, namespaces: list[str] | None = None) -> dict:
        return self._request("POST", f"/v1/knowledge-bases/{kb}/versions/{version}/switch",
                             json={"force": force, "namespaces": namespaces or []})

    def rollback(self, kb: str, *, to: int = 0) -> dict:
        return self._request("POST", f"/v1/knowledge-bases/{kb}/rollback", json={"to": to})

    def drop_version(self, kb: str, version: int) -> dict:
        return self._request("DELETE", f"/v1/knowledge-bases/{kb}/versions/{version}")

    def wait(self, job_ids: Iterable[str], *, on_final: Callable[[dict], None] | None = None,
             poll_s: float = 0.2, timeout_s: float = 3600) -> list[dict]:
        """Poll until every job is final; `on_final` is called once per job as it finishes."""
        pending = list(job_ids)
        finished: dict[str, dict] = {}
        deadline = time.monotonic() + timeout_s
        while pending:
            for job_id in list(pending):
                job = self.job(job_id)
                if job["state"] in FINAL_STATES:
                    finished[job_id] = job
                    pending.remove(job_id)
                    if on_final:
                        on_final(job)
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(pending)} jobs still running after {timeout_s}s")
                time.sleep(poll_s)
        return list(finished.values())

    def query(self, kb: str, query: str, *, namespaces: list[str] | None = None, top_k: int = 0) -> dict:
        return self._request("POST", f"/v1/knowledge-bases/{kb}/query",
                             json={"query": query, "namespaces": namespaces or [], "top_k": top_k})

    def list_documents(self, kb: str, namespace: str = "") -> list[dict]:
        return self._request("GET", f"/v1/knowledge-bases/{kb}/documents", params={"namespace": namespace})["documents"]

    def delete_document(self, kb: str, doc_id: str, *, namespace: str = "") -> dict:
        return self._request("DELETE", f"/v1/knowledge-bases/{kb}/documents/{doc_id}", params={"namespace": namespace})

    def trace(self, trace_id: str) -> dict:
        """The stored trace of a query: step outcomes, stage timings, BM25/dense/fused/reranked/dropped lists."""
        return self._request("GET", f"/v1/traces/{trace_id}")

    def replay(self, trace_id: str) -> dict:
        return self._request("POST", f"/v1/traces/{trace_id}/replay")

    def steps(self) -> dict:
        return self._request("GET", "/v1/admin/steps")

    def set_steps(self, steps: dict) -> dict:
        """Replace the live step settings (step name -> {enabled, skip_when, timeout_s})."""
        return self._request("PUT", "/v1/admin/steps", json={"steps": steps})

    def reload_steps(self) -> dict:
        return self._request("POST", "/v1/admin/steps/reload")

    def create_key(self, name: str, *, role: str, namespaces: list[str], groups: list[str] | None = None) -> dict:
        """A new API key; the raw key is in the answer's `key` and is not shown again."""
        return self._request("POST", "/v1/admin/keys",
                             json={"name": name, "role": role, "namespaces": namespaces, "groups": groups or []})

    def list_keys(self) -> dict:
        return self._request("GET", "/v1/admin/keys")

    def delete_key(self, name: str) -> dict:
        return self._request("DELETE", f"/v1/admin/keys/{name}")

    def metrics(self) -> str:
        response = self._http.get("/metrics")
        response.raise_for_status()
        return response.text

    def close(self) -> None:
        self._http.close()


def _is_json(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")


def iter_files(path: Path) -> list[tuple[Path, str]]:
    """(file, name relative to the ingest root) for a file or every non-hidden file under a folder."""
    if path.is_file():
        return [(path, path.name)]
    files = []
    for file in sorted(path.rglob("*")):
        relative = file.relative_to(path)
        if file.is_file() and not any(part.startswith(".") for part in relative.parts):
            files.append((file, relative.as_posix()))
    return files
