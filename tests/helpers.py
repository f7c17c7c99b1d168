"""Small helpers shared by test modules (fixtures live in conftest.py)."""
from __future__ import annotations

from typing import Any


def jobs_client(ray: Any) -> Any:
    """A JobsClient on the embedded local Ray `ray`, with its token."""
    from orchestrator.jobs.client import JobsClient
    from orchestrator.state import State

    return JobsClient(ray.endpoint(State.here().secrets))
