"""The `apply` use case: under the project's lock, plan again (or check that a saved plan is
still what a plan would be now), ask, and carry the changes out in the plan's order, writing the
state after each one.

    apply_project(ps, options, progress, confirm) -> Applied
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..actions import Action
from ..errors import JobError, OrchestrateError, SpecError, StateError
from ..language.cluster import ClusterSpec
from ..language.experiment import ExperimentSpec
from ..util.progress import Progress
from . import actions, report
from .plan import Planned, PlanOptions, make_plan
from .planner import LEAVING, Change
from .store import ProjectState

LOCK_WAIT = 120.0   # for the short writes after the actions (a job's final status)
Confirm = Callable[[str], bool]


@dataclass(frozen=True)
class ApplyOptions:
    paths: tuple[str, ...] = ()
    plan_file: Path | None = None
    allow_destructive: bool = False
    allow_over_budget: bool = False
    wait: bool = False
    lock_timeout: float = 0


@dataclass
class Applied:
    planned: Planned
    done: list[Change] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)    # experiment -> job id submitted
    results: dict[str, str] = field(default_factory=dict)  # experiment -> final status (--wait)


def check_saved(saved: dict[str, Any], planned: Planned) -> None:
    """StateError when a saved plan is stale: the state or any file moved since it was made."""
    plan = planned.plan
    problems = []
    if saved["lineage"] != plan.lineage:
        problems.append(f"the state's lineage is {plan.lineage}, the plan's {saved['lineage']}")
    elif saved["serial"] != plan.serial:
        problems.append(f"the state was written since (serial {saved['serial']} -> {plan.serial})")
    then = {c["address"]: (c["action"], c["after"], tuple(c["interrupts"]))
            for c in saved["changes"]}
    now = {c.address: (c.action, c.after, c.interrupts) for c in plan.changes}
    moved = sorted(a for a in set(then) | set(now) if then.get(a) != now.get(a))
    if moved:
        problems.append(f"these differ from the saved plan: {', '.join(moved)}")
    if problems:
        raise StateError("the saved plan is stale: " + "; ".join(problems),
                         hint="plan again (`orchestrate plan --out FILE`) and apply that")


def apply_project(ps: ProjectState, options: ApplyOptions, progress: Progress,
                  confirm: Confirm) -> Applied:
    saved = report.load(options.plan_file) if options.plan_file else None
    if saved is not None and saved["project"] != ps.project.name:
        raise StateError(f"{options.plan_file} is a plan of project {saved['project']!r}, not "
                         f"{ps.project.name!r} ({ps.project.file})",
                         hint="run apply in the project's folder, or pass --project FILE")
    paths = tuple(saved["files"]) if saved and saved["partial"] else options.paths
    if saved:
        paths = tuple(str(ps.project.root / p) for p in paths)
    with ps.lock("apply", timeout=options.lock_timeout, progress=progress) as who:
        planned = make_plan(ps, PlanOptions(paths, refresh=True, here=True))
        if saved is not None:
            check_saved(saved, planned)
        applied = Applied(planned)
        plan = planned.plan
        if not plan.actions:
            return applied
        if plan.destructive and not options.allow_destructive:
            listed = "; ".join(f"{c.address} ({c.action}"
                               + (f", interrupts {', '.join(c.interrupts)})" if c.interrupts
                                  else ")") for c in plan.destructive)
            raise OrchestrateError(f"the plan has destructive changes: {listed}; nothing was "
                                   f"changed", hint="review them, then apply with "
                                                    "--allow-destructive")
        over = plan.cost.over if plan.cost is not None else ()
        if over and not options.allow_over_budget:
            raise OrchestrateError("the plan is over the project's budget: " + "; ".join(over)
                                   + "; nothing was changed",
                                   hint="lower max_workers or pick cheaper instances, raise "
                                        f"`budget` in {ps.project.file}, or apply with "
                                        "--allow-over-budget on purpose")
        _check_submissions(planned)
        if not confirm(report.text(plan) + "\n\nApply these changes?"):
            raise OrchestrateError("cancelled; nothing was changed")
        _record_statuses(planned)  # written with the first change
        for change in plan.actions:
            progress(f"{change.address}: {change.action}")
            _carry_out(change, planned, ps, who, applied, progress, options.allow_destructive)
            applied.done.append(change)
    if options.wait:  # jobs may run for hours: followed without holding the lock
        _wait(applied, ps, progress)
    return applied


def _check_submissions(planned: Planned) -> None:
    """What `run` refuses before submitting (an unset `from_env` variable, a wheel the upload
    leaves out), for every experiment to submit, before the first change: a resubmit stops the
    earlier job first, and nothing should be stopped for a job that cannot start."""
    from ..run.experiment import check_environment

    problems = []
    for change in planned.plan.actions:
        item = planned.desired.get(change.address)
        if change.kind == "experiment" and item is not None \
                and isinstance(item.spec, ExperimentSpec):
            try:
                check_environment(item.spec)
            except SpecError as exc:
                problems += exc.problems
    if problems:
        raise SpecError(problems)


def _record_statuses(planned: Planned) -> None:
    """The job statuses the refresh found, into the entries of unchanged experiments, so a
    runner that cannot reach a job's Ray later still knows whether it ended."""
    for change in planned.plan.changes:
        entry = planned.doc.resources.get(change.address)
        if change.kind != "experiment" or change.action is not Action.NOOP or entry is None:
            continue
        status = planned.live.job_status(entry.get("cluster"), entry.get("job_id") or "")
        if status and status != "MISSING":
            entry["status"] = status


def _carry_out(change: Change, planned: Planned, ps: ProjectState, who: Any, applied: Applied,
               progress: Progress, allow_destructive: bool) -> None:
    doc = planned.doc
    item = planned.desired.get(change.address)
    if change.kind == "cluster":
        if change.action is Action.DESTROY:  # destructive: --allow-destructive was given
            actions.cluster_down(change.name, ps, doc, progress, from_state=allow_destructive)
        else:
            assert item is not None and isinstance(item.spec, ClusterSpec)
            # `up` asks the cluster again; if that turns this change destructive (the head
            # stopped answering meanwhile), it goes on only with --allow-destructive.
            actions.cluster_up(item.spec, item.file, ps, doc, who, progress,
                               confirm=lambda _question: allow_destructive)
        return
    if change.action in LEAVING:
        if change.action is Action.STOP:
            actions.experiment_stop(change.name, ps, doc, progress,
                                    from_state=allow_destructive)
        else:
            actions.experiment_forget(change.name, ps, doc)
        return
    assert item is not None and isinstance(item.spec, ExperimentSpec)
    if change.interrupts:  # resubmit: the earlier job is stopped first
        actions.experiment_stop(change.name, ps, doc, progress, forget=False,
                                from_state=allow_destructive)
    applied.jobs[change.name] = actions.experiment_submit(item.spec, item.file, item.hash, ps,
                                                          doc, who, progress)


def _wait(applied: Applied, ps: ProjectState, progress: Progress) -> None:
    """--wait: follow each submitted job to its end; JobError naming the ones that failed."""
    from ..clients.targets import jobs_on
    from ..reach.target import recorded_cluster
    from ..run.experiment import epoch_printer
    from ..state.document import address

    for name, job in applied.jobs.items():
        where = address("experiment", name)
        cluster = applied.planned.doc.resources[where].get("cluster")
        record = recorded_cluster(ps.machine, name=cluster) if cluster else None
        with jobs_on(record, ps.machine) as jobs:
            progress(f"following job {job} ({name})")
            status = jobs.follow(job, epoch_printer(True, progress))
        applied.results[name] = status
        with ps.lock("apply --wait", timeout=LOCK_WAIT, progress=progress):
            doc = ps.read()
            entry = doc.resources.get(where)
            if entry is not None and entry.get("job_id") == job:  # still this job's entry
                entry["status"] = status
                ps.write(doc)
    failed = [f"{name} ({status})" for name, status in applied.results.items()
              if status != "SUCCEEDED"]
    if failed:
        raise JobError(f"job(s) did not succeed: {', '.join(failed)}",
                       hint="orchestrate logs JOB_ID shows why")
