"""Carrying out one change of a project, through the commands' own machinery (cluster.apply's
`up` and `tear_down`, run.experiment's submit), with the state entry written after each:

    cluster_up(spec, file, ps, doc, who, progress) -> UpResult
    cluster_down(name, ps, doc, who, progress, from_state=False)
    experiment_submit(desired, ps, doc, who, progress) -> job id
    experiment_stop(name, ps, doc, progress)

The caller holds the project's lock; `ps.write(doc)` is called after every step that changed
something, so an apply cut half way leaves the state true to what was done. A cluster is acted
on as its file in the repository says (checkout.py); one whose file is gone only with
`from_state` (apply's --allow-destructive).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import OrchestrateError
from ..language.cluster import ClusterSpec
from ..language.experiment import ExperimentSpec
from ..state import cluster_key
from ..state.backends import LockInfo
from ..state.document import Entry, StateDoc, address
from .checkout import checkin, checkout, ensure_token
from .desired import Desired, desired_cluster, from_file
from .store import STAMPS, ProjectState, stamp

if TYPE_CHECKING:  # the types only: cluster.apply brings the launch backend and the SSH client
    from ..cluster.apply import UpOptions, UpResult

from ..util.progress import Progress


def _same(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    def bare(entry: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if entry is None else {k: v for k, v in entry.items() if k not in STAMPS}
    return bare(old) == bare(new)


def _keep(name: str, file: str, ps: ProjectState, doc: StateDoc, who: LockInfo | None,
          before: Entry | None) -> None:
    """This machine's record of the cluster into the state, written only if it changed (a
    no-op `up` leaves the serial alone, so saved plans stay valid)."""
    entry = checkin(name, ps, ps.machine, file, before)
    where = address("cluster", name)
    if _same(doc.resources.get(where), entry):
        return
    if entry is None:
        doc.resources.pop(where, None)
    else:
        doc.resources[where] = stamp(entry, who)
    ps.write(doc)


def wanted(name: str, entry: Entry, ps: ProjectState) -> Desired | None:
    """The recorded cluster's file in the repository, rendered here (None: it is gone)."""
    return from_file(name, entry.get("file"), ps.project,
                     ps.machine.secrets.path(cluster_key(name)))


def checkout_cluster(name: str, ps: ProjectState, doc: StateDoc, *, from_state: bool = False,
                     spec: ClusterSpec | None = None) -> None:
    """This machine's files of a cluster the state records (a no-op for unknown ones), as its
    file (`spec`, else the one its entry names) says."""
    entry = doc.resources.get(address("cluster", name))
    if entry is not None:
        mine = desired_cluster(ps.project, spec, ps.machine.secrets.path(cluster_key(name))) \
            if spec is not None else wanted(name, entry, ps)
        checkout(entry, ps, ps.machine, mine, from_state=from_state).reachable()


def cluster_up(spec: ClusterSpec, file: str, ps: ProjectState, doc: StateDoc,
               who: LockInfo | None, progress: Progress, *, options: UpOptions | None = None,
               confirm: Callable[[str], bool] = lambda _question: True) -> UpResult:
    from ..cluster.apply import UpOptions, up

    entry = doc.resources.get(address("cluster", spec.name))
    options = options or UpOptions()
    if entry is not None:
        mine = desired_cluster(ps.project, spec, ps.machine.secrets.path(cluster_key(spec.name)))
        recorded = checkout(entry, ps, ps.machine, mine).recorded
        options = dataclasses.replace(options, recorded_config=recorded)
    else:
        ensure_token(spec.name, ps, None, ps.machine, create=True)
    try:
        return up(spec, ps.machine, options, progress, confirm)
    finally:  # also after a failed or interrupted `ray up`: the record says how far it got
        _keep(spec.name, file, ps, doc, who, entry)


def cluster_down(name: str, ps: ProjectState, doc: StateDoc, progress: Progress,
                 timeout: float = 900, *, from_state: bool = False) -> None:
    """`from_state`: a cluster whose file is gone is torn down with its state entry's config
    (apply's --allow-destructive); else StateError."""
    from ..cluster.apply import tear_down

    entry = doc.resources[address("cluster", name)]
    vouched = checkout(entry, ps, ps.machine, wanted(name, entry, ps), from_state=from_state).vouched
    if vouched is not None and (vouched.refused or vouched.note):
        progress(f"  cluster {name}: {vouched.note}" if vouched.note else
                 f"  cluster {name}: its logs are not archived from its head: {vouched.refused}")
    try:
        tear_down(name, ps.machine, progress, timeout=timeout)
    finally:
        _keep(name, entry.get("file", ""), ps, doc, None, entry)
    if address("cluster", name) not in doc.resources:
        ps.tokens.delete(cluster_key(name))


def experiment_submit(spec: ExperimentSpec, file: str, content_hash: str, ps: ProjectState,
                      doc: StateDoc, who: LockInfo | None, progress: Progress) -> str:
    from ..run import experiment

    if spec.cluster is not None:
        checkout_cluster(spec.cluster.name, ps, doc, spec=spec.cluster)
    options = experiment.RunOptions(detach=True)
    plan = experiment.prepare(spec, options, progress)
    with experiment.target(spec, ps.machine, keep=True, progress=progress) as (jobs, cluster):
        submission = experiment.submit(plan, spec, jobs, ps.machine, cluster, options)
        status = "SUBMITTED" if submission.created else jobs.status(submission.job_id)
    progress(f"  {'submitted' if submission.created else 'found'} job {submission.job_id} on "
             f"{jobs.endpoint.label}")
    doc.resources[address("experiment", spec.name)] = experiment_entry(
        spec.name, file, content_hash, cluster, submission.job_id, status, who)
    ps.write(doc)
    return submission.job_id


def experiment_entry(name: str, file: str, content_hash: str, cluster: str | None, job_id: str,
                     status: str, who: LockInfo | None) -> dict[str, Any]:
    """An experiment's state entry (apply's, and `run`'s of a project's file)."""
    return stamp({"kind": "experiment", "name": name, "file": file, "hash": content_hash,
                  "cluster": cluster, "job_id": job_id, "status": status,
                  "submitted_at": time.time()}, who)


def experiment_stop(name: str, ps: ProjectState, doc: StateDoc, progress: Progress, *,
                    forget: bool = True, from_state: bool = False) -> None:
    """Stop the experiment's recorded job (if its Ray still has it); then forget the entry."""
    from ..clients.targets import jobs_on
    from ..reach.target import recorded_cluster

    entry = doc.resources[address("experiment", name)]
    job, cluster = entry.get("job_id"), entry.get("cluster")
    if job:
        try:
            if cluster:
                checkout_cluster(cluster, ps, doc, from_state=from_state)
            record = recorded_cluster(ps.machine, name=cluster) if cluster else None
            with jobs_on(record, ps.machine) as jobs:
                stopped = jobs.stop(job)
            progress(f"  {'stopped' if stopped else 'not running:'} job {job}")
        except OrchestrateError as exc:  # its Ray is gone: nothing left to stop
            progress(f"  job {job} could not be reached ({exc.message}); forgetting it")
    if forget:
        doc.resources.pop(address("experiment", name), None)
        ps.write(doc)


def experiment_forget(name: str, ps: ProjectState, doc: StateDoc) -> None:
    doc.resources.pop(address("experiment", name), None)
    ps.write(doc)
