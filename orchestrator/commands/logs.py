"""orchestrate logs JOB: a job's log so far, or followed until it ends. A job whose Ray no longer
knows it: its log as kept when that Ray went (the embedded Ray's, as it stopped; a cluster's,
in the archive written before `down`)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..errors import ClusterError, JobError
from ..output import info

if TYPE_CHECKING:
    from ..reach.archive import Archived


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's submission id")
    parser.add_argument("--cluster", metavar="NAME|CLUSTER.yaml",
                        help="the job's cluster (default: where this machine submitted it)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")


def run(args: argparse.Namespace) -> int:
    from ..clients.targets import archived, jobs_of
    from ..reach import pick
    from ..state import State

    state = State.here()
    try:
        cluster = pick.optional_cluster(args.cluster, state)
    except ClusterError:   # a cluster gone: its archives may have the job
        kept = archived(args.job, state, args.cluster)
        if kept is None:
            raise
        return _kept(kept, follow=args.follow)
    shown = [False]   # lines of Ray's printed: the archive is not printed after them

    def on_line(line: str) -> None:
        shown[0] = True
        print(line)

    try:
        with jobs_of(args.job, cluster, state) as jobs:
            if not args.follow:
                print(jobs.logs(args.job), end="")
                return 0
            try:
                status = jobs.follow(args.job, on_line)
            except KeyboardInterrupt:
                info(f"\nstopped following; job {args.job} keeps running")
                return 130
    except (JobError, ClusterError):   # its Ray is not up (or gone), or does not know the job
        kept = archived(args.job, state, cluster.name if cluster else None) \
            if not shown[0] else None
        if kept is None:
            raise
        return _kept(kept, follow=args.follow)
    info(f"job {args.job}: {status}")
    return 0 if status == "SUCCEEDED" else 1


def _kept(kept: Archived, *, follow: bool) -> int:
    """The log as kept when its Ray stopped; with --follow, the exit of a job that ended."""
    ended = f"{kept.status}" + (", stopped with that Ray" if kept.stopped_with_ray else "")
    when = "that Ray stopped" if kept.kept_at is None else "it was archived"
    info(f"{kept.where} no longer has job {kept.job_id} ({ended}); its log as kept when "
         f"{when}: {kept.log_path}")
    print(kept.log(), end="")
    if not follow:
        return 0
    info(f"job {kept.job_id}: {kept.status}")
    return 0 if kept.status == "SUCCEEDED" else 1
