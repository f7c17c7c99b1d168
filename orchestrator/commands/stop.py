"""orchestrate stop JOB: stop a running job (the cluster keeps running)."""
from __future__ import annotations

import argparse

from ..errors import JobError
from ..output import info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", metavar="JOB", help="the job's submission id")
    parser.add_argument("--cluster", metavar="NAME|CLUSTER.yaml",
                        help="the job's cluster (default: where this machine submitted it)")
    parser.add_argument("--embedded", action="store_true",
                        help="shut down the embedded Ray now (every job on it, and its watchdog)")
    parser.add_argument("--local-ray", dest="embedded", action="store_true",
                        help=argparse.SUPPRESS)   # its old name, for scripts


def run(args: argparse.Namespace) -> int:
    from ..clients.targets import jobs_of
    from ..reach import embedded, pick
    from ..state import State

    state = State.here()
    if args.embedded:
        info("the embedded Ray stopped" if embedded.shutdown(state.secrets)
             else "the embedded Ray is not running")
        return 0
    if not args.job:
        raise JobError("name the job to stop", hint="`orchestrate jobs` lists them")
    with jobs_of(args.job, pick.optional_cluster(args.cluster, state), state) as jobs:
        stopped = jobs.stop(args.job)
        status = jobs.status(args.job)
    info(f"job {args.job}: {'stop requested' if stopped else 'was not running'} ({status})")
    return 0
