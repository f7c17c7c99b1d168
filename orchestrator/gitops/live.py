"""What a refresh found live, as plain data (the planner's third input; refresh.py asks)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the type only: importing health brings the HTTP client
    from ..cluster.health import Health


RUNNING = ("PENDING", "RUNNING")


@dataclass(frozen=True)
class ClusterLive:
    health: Health | None                 # None: it did not answer (error says why)
    error: str | None = None
    jobs: dict[str, str] = field(default_factory=dict)  # submission id -> status
    asked: bool = True                    # False: this machine could not even ask (no token)
    note: str | None = None               # the state named another head than the one asked

    def running(self) -> list[str]:
        return sorted(job for job, status in self.jobs.items() if status in RUNNING)


@dataclass(frozen=True)
class Live:
    refreshed: bool
    clusters: dict[str, ClusterLive] = field(default_factory=dict)
    embedded_jobs: dict[str, str] | None = None   # this runner's embedded Ray (None: not running)

    def job_status(self, cluster: str | None, job_id: str) -> str | None:
        """The job's status, "MISSING" when its Ray answered without it, None when unknown."""
        jobs = self.embedded_jobs if cluster is None else \
            (self.clusters[cluster].jobs if cluster in self.clusters
             and self.clusters[cluster].health else None)
        if jobs is None:
            return None
        return jobs.get(job_id, "MISSING")
