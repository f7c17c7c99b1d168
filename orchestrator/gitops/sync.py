"""`up`, `down` and `run` of a file that belongs to a project keep the project's state true,
so a cluster started with `orchestrate up` shows in `plan` as managed, not as one to create.

    project_of(path) -> ProjectSpec | None     the project whose files include `path`

The single-file command runs through the same actions `apply` uses, under the project's lock
(`run` holds it only to write its entry: a job may run for hours).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StateError
from ..language.cluster import ClusterSpec
from ..language.experiment import ExperimentSpec
from ..language.project import ProjectSpec, find_project, load_project
from ..state import State
from ..state.document import address
from ..util.workdir import WorkingDir
from . import actions
from .desired import desired_experiment
from .store import ProjectState

if TYPE_CHECKING:
    from ..cluster.apply import UpOptions, UpResult

from ..util.progress import Progress

LOCK_WAIT = 120.0   # `run` records its job after submitting it: worth waiting for the lock


def project_of(path: Path) -> ProjectSpec | None:
    found = find_project(path)
    if found is None:
        return None
    project = load_project(found)
    return project if project.contains(path) else None


def up(project: ProjectSpec, spec: ClusterSpec, machine: State, options: UpOptions,
       progress: Progress, confirm: Callable[[str], bool]) -> UpResult:
    ps = ProjectState.open(project, machine)
    progress(f"{spec.path} belongs to project {project.name} ({project.file})")
    with ps.lock("up", progress=progress) as who:
        doc = ps.read()
        return actions.cluster_up(spec, project.relative(spec.path), ps, doc, who, progress,
                                  options=options, confirm=confirm)


def down(project: ProjectSpec, name: str, machine: State, progress: Progress,
         timeout: float) -> bool:
    """False when the project's state does not record the cluster (the caller goes on)."""
    ps = ProjectState.open(project, machine)
    progress(f"cluster {name} belongs to project {project.name} ({project.file})")
    with ps.lock("down", progress=progress):
        doc = ps.read()
        if address("cluster", name) not in doc.resources:
            return False
        actions.cluster_down(name, ps, doc, progress, timeout=timeout)
    return True


def record_run(project: ProjectSpec, spec: ExperimentSpec, shipped: WorkingDir, job_id: str,
               cluster: str | None, machine: State, progress: Progress) -> None:
    """After `run` submitted a job: the experiment's entry, as `apply` would write it (from the
    spec `run` loaded and the working_dir it walked: each file is read once per command)."""
    ps = ProjectState.open(project, machine)
    progress(f"recording job {job_id} in project {project.name}'s state ({project.file})")
    item = desired_experiment(project, spec, shipped)
    try:
        with ps.lock("run", timeout=LOCK_WAIT, progress=progress) as who:
            doc = ps.read()
            doc.resources[item.address] = actions.experiment_entry(
                item.name, item.file, item.hash, cluster, job_id, "SUBMITTED", who)
            ps.write(doc)
    except StateError as exc:  # the job runs all the same; the next plan shows it as new
        progress(f"warning: job {job_id} is not recorded in project {project.name}'s state: "
                 f"{exc.message}")
