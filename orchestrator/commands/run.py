"""orchestrate run EXPERIMENT.yaml: submit the job, follow it, print its results.

Without `cluster:` the job goes to the embedded local Ray (started for the run, stopped after it,
or reused if one is up). The submission id comes from the experiment's content: an unchanged
experiment finds the job it already started instead of starting it twice (--force: run again).
"""
from __future__ import annotations

import contextlib
import json
import time

from ..errors import JobError
from ..output import add_format_argument, info

TAIL = 25  # log lines shown when a job fails


def add_arguments(parser) -> None:
    parser.add_argument("experiment", metavar="EXPERIMENT.yaml")
    parser.add_argument("--detach", action="store_true", help="return once the job is submitted")
    parser.add_argument("--force", action="store_true",
                        help="submit even if this exact experiment was already submitted")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run from its latest checkpoint")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="show per-epoch progress only, not the job's whole log")
    add_format_argument(parser)


@contextlib.contextmanager
def _target(spec, detach: bool):
    from ..jobs import local, targets
    from ..jobs.submit import Jobs

    if spec.cluster is not None:
        with targets.cluster_jobs(str(spec.cluster.path)) as jobs:
            yield jobs, str(spec.cluster.path)
        return
    num_workers = (spec.document.get("scaling_config") or {}).get("num_workers", 1)
    with local.session(num_cpus=None if num_workers < 3 else num_workers + 2, keep=detach) as (ray, started):
        info(f"{'started' if started else 'using'} a local Ray ({ray.address})")
        yield Jobs(targets.local_target(ray)), None


def _progress(quiet: bool):
    from ..runtime.results import EPOCH_MARK, RESULT_MARK

    def on_line(line: str) -> None:
        index = line.find(EPOCH_MARK)
        if index >= 0:
            row = json.loads(line[index + len(EPOCH_MARK):])
            shown = "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in row.items() if k != "checkpoint")
            info(f"» {shown}")
        elif not quiet and RESULT_MARK not in line:
            info(line)
    return on_line


def run(args) -> int:
    from ..jobs import registry
    from ..jobs.submit import parse_result
    from ..render.experiment import digest_directory, render_job
    from ..spec.experiment import load_experiment

    spec = load_experiment(args.experiment)
    plan = render_job(spec, working_dir_digest=digest_directory(spec.working_dir),
                      resume=args.resume)
    job_id = plan.submission_id + (f"-{int(time.time() * 1000):x}" if args.force else "")
    started = time.monotonic()
    with _target(spec, args.detach) as (jobs, cluster):
        created = jobs.submit(entrypoint=plan.entrypoint, runtime_env=plan.runtime_env,
                              submission_id=job_id, metadata={"experiment": spec.name})
        if created:
            registry.record_job(job_id, cluster=cluster, experiment=str(spec.path),
                                name=plan.config["run_config"]["name"])
            info(f"submitted job {job_id} to {jobs.target.label}")
        else:
            info(f"job {job_id} already exists ({jobs.status(job_id)}): this experiment is "
                 f"unchanged since it was submitted; not starting a duplicate (--force runs it "
                 f"again)")
        if args.detach:
            info(f"follow it: orchestrate logs --follow {job_id}\nstop it:   orchestrate stop {job_id}")
            print(job_id)
            return 0
        try:
            status = jobs.follow(job_id, _progress(args.quiet))
        except KeyboardInterrupt:
            _leave_running(job_id, cluster)
            return 130
        log = jobs.logs(job_id)
    summary = parse_result(log) or {}
    if status != "SUCCEEDED" or summary.get("status") != "SUCCEEDED":
        info("\n".join(["", "last lines of the job's log:"] + log.rstrip().splitlines()[-TAIL:]))
        reason = summary.get("error") or f"the job ended {status}"
        raise JobError(f"job {job_id} failed: {reason}",
                       hint=f"the whole log: orchestrate logs {job_id}" if cluster else None)
    summary["wall_time_s"] = round(time.monotonic() - started, 1)
    for key in {summary.get("name"), plan.config["run_config"]["name"]}:  # the run, and latest
        registry.record_run(key, summary, job_id)
    from .results import show

    show(summary, args.format)
    return 0


def _leave_running(job_id: str, cluster: str | None) -> None:
    from ..jobs import local

    if cluster is None:
        local.keep_running()
    info(f"\nstopped following; job {job_id} keeps running.\n"
         f"  follow it: orchestrate logs --follow {job_id}\n"
         f"  stop it:   orchestrate stop {job_id}"
         + ("" if cluster else "\n  then stop the local Ray: orchestrate stop --local-ray"))
