"""orchestrate profile JOB: a CPU flame graph (SVG), the stacks and, with --memory, a memory flame
graph (HTML) of each Ray Train worker of a running job, written to files (the dashboard's
profiling, from a terminal or CI)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..output import add_format_argument, emit_json, info, printable


def _duration(text: str) -> int:
    from ..observe.profile import MAX_DURATION

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_DURATION:
        raise argparse.ArgumentTypeError(f"expected whole seconds from 1 to {MAX_DURATION}, "
                                         f"got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..observe.profile import DEFAULT_DURATION

    parser.add_argument("job", metavar="JOB", help="the running job's submission id")
    parser.add_argument("--cluster", metavar="NAME|CLUSTER.yaml",
                        help="the job's cluster (default: where this machine submitted it)")
    parser.add_argument("--duration", type=_duration, default=DEFAULT_DURATION, metavar="S",
                        help=f"seconds to sample each worker (default: {DEFAULT_DURATION})")
    parser.add_argument("--memory", action="store_true",
                        help="also profile each worker's memory with memray for the same "
                             "duration, after the CPU profile: a flame graph of its "
                             "allocations (HTML)")
    parser.add_argument("--output", metavar="DIR", type=Path,
                        help="where the files go (default: ./profile-JOB-TIME)")
    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    import contextlib
    import time

    from ..observe.profile import default_folder, profile_job
    from ..reach import embedded, pick
    from ..reach.target import open_target
    from ..state import State

    state = State.here()
    cluster = pick.optional_cluster(args.cluster, state)
    folder = args.output or default_folder(args.job, time.time())
    with contextlib.ExitStack() as stack:
        if cluster is None and not (state.store.job(args.job) or {}).get("cluster"):
            # the embedded Ray's: its watchdog does not stop it while it is profiled
            stack.enter_context(embedded.user(state.secrets))
        endpoint = stack.enter_context(open_target(state, cluster, job=args.job))
        profile = profile_job(endpoint, args.job, folder=folder, duration=args.duration,
                              memory=args.memory, progress=info if args.format == "text" else lambda _: None)
    if args.format == "json":
        emit_json(profile.as_dict())
    else:
        info(f"job {profile.job_id} on {profile.target}: {len(profile.workers)} worker"
             f"{'s' if len(profile.workers) != 1 else ''} profiled for {profile.duration} s, "
             f"files in {profile.folder}")
        for index, done in enumerate(profile.workers):
            files = [str(p) for p in done.files]
            print(f"worker {index} (pid {done.worker.pid}, node {done.worker.node_id[:8]}): "
                  + (", ".join(files) or "nothing written")
                  + (f"  [{printable(done.error)}]" if done.error else ""))
    for done in profile.failed:   # the error quotes Ray's dashboard: data, not for the terminal
        info(f"ERROR worker pid {done.worker.pid}: {printable(done.error or '')}")
    return 1 if profile.failed else 0
