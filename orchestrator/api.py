"""orchestrate from Python: the use cases the CLI runs, for notebooks and pipelines (Airflow,
Prefect, a script), taking paths or specs and returning typed results. Nothing is printed but
what `progress` is given, nothing prompts, nothing exits: a failure raises the project's own
errors (`orchestrator.errors.OrchestrateError` and its kinds, each with `.message` and `.hint`).

    import orchestrator.api as orc

    orc.up("cluster_configs/local.yaml", restart=True)        -> Up
    orc.status()                                               -> list of cluster rows
    ran = orc.run("experiments/quickstart.yaml")              -> Ran (its `summary`)
    orc.results(ran.job_id)                                    -> the run's summary
    orc.results("run-a", "run-b", plot="ab.png")               -> Comparison
    orc.down("my-cluster")                                     -> Down

The CLI's `up`, `down`, `status`, `run` and `results` are these functions with their output
formatted: the same code path (docs/python.md).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .util.progress import Progress, silent

if TYPE_CHECKING:
    from .cluster.apply import UpResult
    from .language.cluster import ClusterSpec
    from .language.experiment import ExperimentSpec
    from .run.experiment import FollowerFactory, Ran
    from .run.progress import Display
    from .state import ClusterRecord, State

__all__ = ["Comparison", "Down", "Up", "down", "results", "run", "status", "up"]


def _state(state: State | None) -> State:
    from .state import State

    return state if state is not None else State.here()


# --- clusters ---

@dataclass(frozen=True)
class Up:
    """What `up` did: its action ("created", "unchanged", ...), the plan, the record, the
    cluster's health (None: not waited for) and its price (None: no config recorded)."""
    result: UpResult
    price: dict[str, Any] | None
    project_file: Path | None      # a project's cluster file: its shared state followed

    @property
    def action(self) -> str:
        return self.result.action

    @property
    def record(self) -> ClusterRecord:
        return self.result.record

    def as_dict(self) -> dict[str, Any]:
        """What `up --format json` prints."""
        result = self.result
        return {"action": result.action, "changes": list(result.plan.changes),
                "plan": result.plan.as_dict(), **result.record.as_dict(),
                "project_file": str(self.project_file) if self.project_file else None,
                "health": result.health.as_dict() if result.health else None,
                "price": self.price}


def up(cluster: str | Path | ClusterSpec, *, restart: bool = False, preflight: bool = True,
       wait: bool = True, timeout: float = 1800, wait_timeout: float = 600,
       progress: Progress = silent, state: State | None = None,
       ask: Any = None) -> Up:
    """Launch, or update, the cluster of a file. A change that restarts Ray on a running
    cluster is made only with `restart=True` (else OrchestrateError, nothing changed); `ask`, a
    function of the question, is asked instead when given (the CLI's prompt)."""
    from .cluster.apply import UpOptions
    from .cluster.apply import up as apply_up
    from .gitops import sync
    from .language.cluster import ClusterSpec, load_cluster

    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(str(cluster), here=True)
    state = _state(state)
    options = UpOptions(preflight=preflight, wait=wait, timeout=timeout,
                        wait_timeout=wait_timeout)
    confirm = ask if ask is not None else (lambda _question: restart)
    project = sync.project_of(spec.path)   # a project's file: its shared state follows
    result = sync.up(project, spec, state, options, progress, confirm) if project else \
        apply_up(spec, state, options, progress, confirm)
    return Up(result, _price(state, result.record, result.health),
              project.file if project else None)


def _price(state: State, record: ClusterRecord, health: Any) -> dict[str, Any] | None:
    """The cluster's price now and at min/max workers (None: its config is not recorded). The
    cluster is up by now: a price that cannot be worked out is unknown, with the reason as a
    warning, never an error."""
    from .cluster.price import running, unknown
    from .errors import OrchestrateError

    try:
        config = state.store.read_rendered(record.name)
        return running(config, health, record.came_up) if config else None
    except OrchestrateError as exc:
        return unknown(exc.message)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:   # as status's rows
        return unknown(f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Down:
    """What `down` did: whether the cluster was still up (False: another command took it down
    first), and the project whose state forgot it too (None: no project's state recorded it)."""
    was_up: bool
    project: str | None = None


def down(cluster: str | Path | ClusterRecord, *, timeout: float = 900,
         progress: Progress = silent, state: State | None = None) -> Down:
    """Take a recorded cluster down (by name, file or record) and forget it, in its
    project's state too when its file is a project's and the state records it."""
    from .cluster.apply import tear_down
    from .gitops import sync
    from .state import ClusterRecord

    state = _state(state)
    record = cluster if isinstance(cluster, ClusterRecord) else _record(str(cluster), state)
    project = sync.project_of(Path(record.file)) if Path(record.file).is_file() else None
    if project and sync.down(project, record.name, state, progress, timeout):
        return Down(True, project.name)
    return Down(bool(tear_down(record.name, state, progress, timeout=timeout)))


def _record(name_or_file: str, state: State) -> ClusterRecord:
    from .reach import pick

    return pick.cluster(name_or_file, state)


STOPPED = "stopped"   # by autostop: the record says up, the head's watcher says why not


def status(cluster: str | Path | None = None, *, state: State | None = None) -> list[dict[str, Any]]:
    """Each recorded cluster (or the one named: a name or a file) with what it answers now
    (`live`), its autostop and its price: the rows of `status --format json`."""
    from .cluster import health

    state = _state(state)
    records = [_record(str(cluster), state)] if cluster is not None else \
        state.store.list_clusters()
    return [_row(r, state, health.live(r, state), health.autostop(r, state)) for r in records]


def _row(record: ClusterRecord, state: State, live: dict[str, Any],
         autostop: dict[str, Any] | None) -> dict[str, Any]:
    """A cluster's record, what it answers now, its autostop and its price (None: no config
    recorded)."""
    from .cluster.health import Health
    from .cluster.price import running
    from .errors import ClusterError

    try:
        config = state.store.read_rendered(record.name)
    except ClusterError:
        config = None   # `live` says why already
    health = Health(live["nodes_alive"], live["nodes_dead"], live["session"],
                    node_types=live.get("node_types") or {}) if live["reachable"] else None
    try:
        price = running(config, health, record.came_up if health else None) \
            if config else None
    except (KeyError, TypeError, ValueError, AttributeError):
        price = None    # a damaged record: no price, the rest of the row still shows
    row = {**record.as_dict(), "live": live, "autostop": autostop, "price": price}
    if autostop and autostop.get("stopped_at") is not None and not live["reachable"]:
        # the head's watcher took it down: that is its state, whatever this machine recorded
        row["recorded_state"], row["state"] = row["state"], STOPPED
    return row


# --- experiments ---

def run(experiment: str | Path | ExperimentSpec, *, detach: bool = False, force: bool = False,
        resume: bool = False, quiet: bool = True, follower: FollowerFactory | None = None,
        progress: Progress = silent, state: State | None = None,
        out: TextIO | None = None) -> Ran:
    """Submit an experiment (to its cluster, else the embedded Ray), once: an unchanged one
    finds the job it started (`force`: again). Unless `detach`, follow it to its end and
    return its results (`Ran.summary`); a job that failed raises JobError. While following,
    one line per epoch goes to `out` (default: stderr; `quiet=False`: the job's whole log),
    and the whole log to a file under orchestrate's home; `follower(config, job_id, secrets)`
    makes the display instead (the CLI's)."""
    from .language.experiment import ExperimentSpec, load_experiment
    from .run import experiment as use_case

    spec = experiment if isinstance(experiment, ExperimentSpec) else \
        load_experiment(str(experiment))
    state = _state(state)
    options = use_case.RunOptions(detach=detach, force=force, resume=resume, quiet=quiet)

    def in_project(submission: use_case.Submission, shipped: Any) -> None:
        """A project's experiment: its entry in the project's state, as `apply` would write it."""
        from .gitops import sync

        project = sync.project_of(spec.path)
        if project is not None:
            sync.record_run(project, spec, shipped, submission.job_id, submission.cluster,
                            state, progress)

    def lines(config: Any, job_id: str, secrets: dict[str, str]) -> Display:
        return display(config, job_id, secrets, verbose=not quiet, live=False, out=out,
                       progress=progress)

    return use_case.run(spec, options, state, progress, follower or lines, in_project)


def display(config: Any, job_id: str, secrets: dict[str, str], *, verbose: bool, live: bool,
            out: TextIO | None = None, progress: Progress = silent) -> Display:
    """What a followed run shows: its whole log to a file (its path told to `progress`); on
    `out` its whole log (`verbose`), a live status line (`live`), or one line per epoch."""
    from .run import progress as shown
    from .state import home
    from .util.text import hide

    mode = shown.VERBOSE if verbose else shown.LIVE if live else shown.LINES
    log_path = home() / "logs" / f"{job_id}.log"
    if mode != shown.VERBOSE:
        progress(f"the job's whole log: {log_path} (-v shows it here)")
    return shown.Display(mode, epochs=shown.total_epochs(config), log_path=log_path,
                         hide=lambda text: hide(text, secrets), out=out or sys.stderr)


@dataclass(frozen=True)
class Comparison:
    """Several runs side by side: `table` (`runs`, `params` that differ, `final` and `best`
    metrics, `plot`: the path of the plot of their curves when there was one) and each run's
    summary."""
    table: dict[str, Any]
    summaries: list[dict[str, Any]]


def results(*runs: str, plot: str | Path | None = None,
            state: State | None = None) -> dict[str, Any] | Comparison:
    """A finished run's summary (its metrics, best checkpoint, plot; a sweep's trials), by run
    name, job id or the run's folder (a path or URI); with several runs, their Comparison, its
    plot written to `plot` (default: under orchestrate's home)."""
    from .errors import OrchestrateError, require
    from .run.experiment import find_results

    if not runs:
        raise OrchestrateError("name a run: a run name, a job id or the run's folder")
    state = _state(state)
    summaries = [find_results(key, state) for key in runs]
    if len(summaries) == 1:
        return summaries[0]
    from .results import compare
    from .state import home

    require("pyarrow", "pyarrow", "ray")          # the histories, where the runs wrote them
    require("matplotlib", "matplotlib", "ray")    # the plot
    histories = [compare.history_of(s) for s in summaries]
    table = compare.comparison(summaries, histories)
    png = compare.overlay(summaries, histories, table["params"])
    if png is not None:
        names = "-vs-".join(compare.label(s) for s in summaries)[:120]
        path = Path(plot) if plot is not None else home() / "plots" / f"compare-{names}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        table["plot"] = str(path)
    return Comparison(table, summaries)
