"""orchestrate run EXPERIMENT.yaml: submit the job, follow it, print its results.

Without `cluster:` the job goes to the embedded Ray (reused if one is up, else started; it
stays up once idle for ORCHESTRATE_EMBEDDED_RAY_IDLE, default 10m, for the next run). The
submission id comes from the experiment's content: an unchanged experiment finds the job it
already started instead of starting it twice (--force: run again).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..output import add_format_argument, emit_json, info

if TYPE_CHECKING:
    from ..contract import JobConfig
    from ..run import experiment, progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", metavar="EXPERIMENT.yaml", help="the experiment YAML file")
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
    from .. import api
    from .results import show

    ran = api.run(args.experiment, detach=args.detach, force=args.force, resume=args.resume,
                  quiet=args.quiet, progress=info,
                  follower=lambda config, job_id, secrets: _display(args, config, job_id, secrets))
    return finish(ran, args.format, show)


def finish(ran: experiment.Ran, form: str, show: Callable[[dict[str, Any], str], None]) -> int:
    """For `run` and `predict`: the summary shown, or for a job not followed to its end its id
    printed (detached) or 130 (Ctrl-C); the exit code."""
    if ran.interrupted:
        return 130
    if ran.summary is not None:
        # a script's next command (`logs JOB`) needs the job's id, as a detached run gives it
        show({**ran.summary, "job_id": ran.job_id, "cluster": ran.cluster}
             if form == "json" else ran.summary, form)
    elif form == "json":
        emit_json({"job_id": ran.job_id, "created": ran.created, "cluster": ran.cluster})
    else:
        print(ran.job_id)
    return 0


def _display(args: argparse.Namespace, config: JobConfig, job_id: str,
             secrets: dict[str, str]) -> progress.Display:
    """The job's log to a file; on the screen what -v / -q / a terminal ask for."""
    import sys

    from .. import api

    return api.display(config, job_id, secrets, verbose=args.verbose,
                       live=sys.stderr.isatty() and not args.quiet, progress=info)
