"""`orchestrate run` of an experiment with `own_cluster`: a RayJob, which KubeRay runs on a
cluster it makes from the experiment's (KubeRay) cluster file and deletes afterwards.

    run(spec, plan, shipped, state, progress, detach=...) -> Outcome

The job's code goes to the package store first (run.package_store): KubeRay's submitter runs
`ray job submit` inside the Kubernetes cluster and cannot upload from here; a zip already in the
store is read back first, and one that does not hold the files its name claims stops `run`
before the RayJob names it. Then the cluster file's token Secret and the RayJob
(launch.kuberay.manifests.ray_job, checked as KubeRay would); the same experiment submitted again finds
its RayJob instead of making another. `run` follows the RayJob's state until its job ends; the
job's own log is the submitter's (`kubectl logs`) and, while the cluster is kept, its dashboard's.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import launch
from ..errors import JobError, Problem, SpecError
from ..launch.kuberay import manifests as kuberay
from ..render import packages
from ..render.cluster import render_cluster
from ..state import State, cluster_key
from ..util.progress import Progress
from . import package_store

if TYPE_CHECKING:
    from ..contract import JobConfig
    from ..language.experiment import ExperimentSpec
    from ..render.experiment import JobPlan
    from ..util.workdir import WorkingDir


def manifest(spec: ExperimentSpec, plan: JobPlan[JobConfig],
             shipped: WorkingDir | None) -> dict[str, Any]:
    """The RayJob `run` would create (the store's URIs from the files' digests), or SpecError
    naming `own_cluster` with what KubeRay would refuse."""
    return _rendered(spec, plan, shipped)[1]


def _rendered(spec: ExperimentSpec, plan: JobPlan[JobConfig],
              shipped: WorkingDir | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the cluster file's config, the RayJob made from it)."""
    assert spec.cluster is not None   # the language requires a KubeRay cluster file
    own = spec.own_cluster
    assert own is not None   # run only for an experiment with `own_cluster`
    config = render_cluster(spec.cluster, token_file="-").config
    job = kuberay.ray_job(plan, config, own, packages.uris(own["package_store"], shipped))
    refused = kuberay.findings_at(job)
    if refused:
        raise SpecError([_problem(spec, line) for line in refused])
    return config, job


def _problem(spec: ExperimentSpec, message: str) -> Problem:
    if spec.source is not None:
        return spec.source.problem(("own_cluster",), message)
    return Problem(str(spec.path), message, field="own_cluster")


@dataclass(frozen=True)
class Outcome:
    job_id: str
    created: bool              # False: the RayJob of this submission existed already
    interrupted: bool = False  # Ctrl-C while following: it keeps running


def run(spec: ExperimentSpec, plan: JobPlan[JobConfig], shipped: WorkingDir, state: State,
        progress: Progress, *, detach: bool, force: bool = False) -> Outcome:
    assert spec.cluster is not None
    if force:   # another RayJob of the same experiment (as --force makes another Ray job)
        plan = dataclasses.replace(
            plan, submission_id=f"{plan.submission_id}-{int(time.time() * 1000):x}")
    config, job = _rendered(spec, plan, shipped)
    name = str(job["metadata"]["name"])
    namespace = str(config["provider"]["namespace"])
    own = spec.own_cluster
    assert own is not None
    store = own["package_store"]
    progress(f"putting the job's code in {store}")
    package_store.put(store, shipped, progress)
    state.secrets.ensure(cluster_key(spec.cluster.name))
    backend = launch.jobs_on_own_cluster(spec.cluster, state, progress)
    created, stored = backend.submit_job(spec.cluster.name, config, job)
    where = f"RayJob {namespace}/{name} (job {plan.submission_id})"
    ended = (stored.get("status") or {}).get("jobStatus") or ""
    progress(f"submitted {where}" if created else
             f"{where} exists already{f' (it ended {ended})' if ended else ''}: this "
             "experiment is unchanged since it was submitted; not starting a duplicate "
             "(--force runs it again)")
    if detach:
        progress(f"follow it: kubectl -n {namespace} get rayjob {name} -w")
        return Outcome(plan.submission_id, created)
    try:
        status = backend.follow_job(config, name)
    except KeyboardInterrupt:
        progress(f"left running: RayJob {namespace}/{name} (kubectl -n {namespace} delete "
                 f"rayjob {name} stops it)")
        return Outcome(plan.submission_id, created, interrupted=True)
    if status.get("jobStatus") != "SUCCEEDED":
        cluster = status.get("rayClusterName") or "its cluster"
        kept = kuberay.kept_seconds(own)
        raise JobError(f"{where} ended {status.get('jobStatus') or status.get('jobDeploymentStatus')}"
                       + (f": {status['message']}" if status.get("message") else ""),
                       hint=f"the submitter's log: kubectl -n {namespace} logs job/{name}; "
                            f"{cluster} is kept {kept} s to look into")
    progress(f"{where} succeeded; its results are where run_config.storage_path says")
    return Outcome(plan.submission_id, created)
