"""orchestrate logs JOB: a job's log so far, or followed until it ends."""
from __future__ import annotations

import argparse

from ..output import info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's submission id")
    parser.add_argument("--cluster", metavar="NAME|CLUSTER.yaml",
                        help="the job's cluster (default: where this machine submitted it)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")


def run(args: argparse.Namespace) -> int:
    from ..jobs.targets import jobs_of
    from ..state import State
    from . import pick

    state = State.here()
    with jobs_of(args.job, pick.optional_cluster(args.cluster, state), state) as jobs:
        if not args.follow:
            print(jobs.logs(args.job), end="")
            return 0
        try:
            status = jobs.follow(args.job, print)
        except KeyboardInterrupt:
            info(f"\nstopped following; job {args.job} keeps running")
            return 130
    info(f"job {args.job}: {status}")
    return 0 if status == "SUCCEEDED" else 1
