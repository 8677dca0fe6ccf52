"""Admin REST routes for the live step settings (applied to the next request, no restart)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from services.gateway.query.steps import StepsConfig

router = APIRouter(prefix="/v1/admin/steps", tags=["admin"])


class StepsBody(BaseModel):
    steps: dict[str, Any] = Field(description="step name -> {enabled, skip_when, timeout_s}; missing steps get defaults")


def _view(registry) -> dict:
    return {"steps": registry.current().model_dump(mode="json"), "source": str(registry.path) if registry.path else None,
            "last_error": registry.last_error}


@router.get("")
def get_steps(request: Request):
    return _view(request.app.state.gateway.runtime.steps)


@router.put("")
def put_steps(body: StepsBody, request: Request):
    registry = request.app.state.gateway.runtime.steps
    registry.replace(StepsConfig.parse(body.steps, source="request body"))
    return _view(registry)


@router.post("/reload")
def reload_steps(request: Request):
    """Re-read the steps file now (it is also re-read on its own when it changes)."""
    registry = request.app.state.gateway.runtime.steps
    registry.reload()
    return _view(registry)
