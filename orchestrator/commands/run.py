"""orchestrate run EXPERIMENT.yaml: submit the job, follow it, print its results.

Without `cluster:` the job goes to the embedded local Ray (started for the run, stopped after it,
or reused if one is up). The submission id comes from the experiment's content: an unchanged
experiment finds the job it already started instead of starting it twice (--force: run again).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..output import add_format_argument, emit_json, info

if TYPE_CHECKING:
    from ..contract import JobConfig
    from ..jobs import progress
    from ..state import State


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", metavar="EXPERIMENT.yaml")
    parser.add_argument("--detach", action="store_true", help="return once the job is submitted")
    parser.add_argument("--force", action="store_true",
                        help="submit even if this exact experiment was already submitted")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run from its latest checkpoint")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("-v", "--verbose", action="store_true",
                       help="stream the job's whole log (Ray's own lines too); it always goes "
                            "to a file whose path is printed")
    shown.add_argument("-q", "--quiet", action="store_true",
                       help="one line per epoch, no live status line even at a terminal (the "
                            "default off a terminal)")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..errors import JobError
    from ..jobs import experiment
    from ..language.experiment import load_experiment
    from ..state import State
    from ..util.text import hide
    from .results import show

    spec = load_experiment(args.experiment)
    options = experiment.RunOptions(detach=args.detach, force=args.force, resume=args.resume,
                                    quiet=args.quiet)
    state = State.here()
    started = time.monotonic()
    plan = experiment.prepare(spec, options, info)
    # The job's log is shown as it comes: a secret it prints (a user's exception, say) is not.
    secrets = {name: os.environ[source] for name, source in plan.secrets.items()}

    def say(text: str) -> None:
        info(hide(text, secrets))

    with experiment.target(spec, state, keep=options.detach, progress=info) as (jobs, cluster):
        submission = experiment.submit(plan, spec, jobs, state, cluster, options)
        job_id = submission.job_id
        if submission.created:
            info(f"submitted job {job_id} to {jobs.endpoint.label}")
            _record_in_project(spec.path, job_id, submission.cluster, state)
        else:
            info(f"job {job_id} already exists ({jobs.status(job_id)}): this experiment is "
                 f"unchanged since it was submitted; not starting a duplicate (--force runs it "
                 f"again)")
        if options.detach:
            info(f"follow it: orchestrate logs --follow {job_id}\n"
                 f"stop it:   orchestrate stop {job_id}")
            if args.format == "json":
                emit_json({"job_id": job_id, "created": submission.created,
                           "cluster": submission.cluster})
            else:
                print(job_id)
            return 0
        display = _display(args, plan.config, job_id, secrets)
        try:
            status = jobs.follow(job_id, display.on_line)
        except KeyboardInterrupt:
            display.close()
            info(experiment.leave_running(job_id, submission.cluster, state))
            return 130
        finally:
            display.close()   # the status line cleared, the log file closed (also on an error)
        try:
            summary = experiment.results(jobs, submission, status, started, state, say)
        except JobError as exc:
            hint = "; ".join(h for h in (exc.hint, f"the log as followed here: {display.log_path}") if h)
            raise JobError(hide(exc.message, secrets), hint=hint) from None
    show(summary, args.format)
    return 0


def _display(args: argparse.Namespace, config: JobConfig, job_id: str,
             secrets: dict[str, str]) -> progress.Display:
    """The job's log to a file; on the screen what -v / -q / a terminal ask for."""
    import sys

    from ..jobs import progress
    from ..state import home
    from ..util.text import hide

    mode = (progress.VERBOSE if args.verbose else
            progress.LIVE if sys.stderr.isatty() and not args.quiet else progress.LINES)
    log_path = home() / "logs" / f"{job_id}.log"
    if mode != progress.VERBOSE:
        info(f"the job's whole log: {log_path} (-v shows it here)")
    return progress.Display(mode, epochs=progress.total_epochs(config), log_path=log_path,
                            hide=lambda text: hide(text, secrets))


def _record_in_project(path: Path, job_id: str, cluster: str | None, state: State) -> None:
    """A project's experiment: its entry in the project's state, as `apply` would write it."""
    from ..gitops import sync

    project = sync.project_of(path)
    if project is not None:
        sync.record_run(project, path, job_id, cluster, state, info)
