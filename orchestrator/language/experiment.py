"""Experiment YAML -> ExperimentSpec: a declarative Ray Train run, checked before submission.

Relative paths (`cluster`, `working_dir`, local dataset paths, a local `storage_path`) are
relative to the experiment file's folder; `working_dir` defaults to that folder. A run on a
cluster that can have several nodes needs storage every node reaches: its `storage_path`, else
the cluster file's `storage:`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import cluster_settings, trainers
from ..contract import DOMAINS, LIST_DOMAINS
from ..errors import Problem, SpecError
from ..util.text import did_you_mean
from ..util.uris import CREDENTIALS_HINT, CREDENTIALS_MESSAGE, has_credentials, is_uri
from ..yamlload import Document, FieldPath, load_file
from . import environment, images
from .cluster import ClusterSpec, load_cluster
from .environment import Environment
from .paths import holds, local
from .schema import broken_keys, load_schema, schema_problems

TUNABLE_SECTIONS = ("train_loop_config", "params", "num_boost_round", "scaling_config")
# Scalers without `columns` apply to every feature column; these need them named.
NEEDS_COLUMNS = {"Categorizer", "OneHotEncoder", "OrdinalEncoder", "MultiHotEncoder", "Tokenizer",
                 "FeatureHasher", "Concatenator"}


@dataclass(frozen=True)
class ExperimentSpec:
    path: Path
    name: str
    trainer: str
    document: dict[str, Any] = field(repr=False)
    working_dir: Path
    cluster: ClusterSpec | None = None  # None: the embedded Ray
    source: Document | None = field(repr=False, compare=False, default=None)
    environment: Environment = field(default_factory=Environment)  # runtime_env: pip, env_vars

    @property
    def own_cluster(self) -> dict[str, Any] | None:
        """`own_cluster`: the run brings a cluster of its own (a RayJob); None: it does not."""
        own = self.document.get("own_cluster")
        return dict(own) if isinstance(own, dict) else None

    @property
    def profiling(self) -> bool:
        """The embedded Ray is to start with the dashboard's profiling on (a cluster has it from
        its own file: `cluster_settings.profiling`)."""
        return self.document.get("profiling") is True


def _trainer_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    """The trainer's own checks (`orchestrator.trainers`), and fields only other trainers take."""
    return trainers.get(data["trainer"]).problems(doc, data) + trainers.foreign_problems(doc, data)


def _preprocessor_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    problems = []
    for i, pre in enumerate(data.get("preprocessors") or []):
        if pre["type"] in NEEDS_COLUMNS and not pre.get("columns"):
            problems.append(doc.problem(("preprocessors", i), f"{pre['type']} needs 'columns'"))
        if pre["type"] == "LabelEncoder" and "label_column" not in pre:
            problems.append(doc.problem(("preprocessors", i), "LabelEncoder needs 'label_column'"))
    return problems


def _domain_problems(doc: Document, value: Any, path: FieldPath) -> list[Problem]:
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _domain_problems(doc, item, path + (i,))]
    if not isinstance(value, dict):
        return []
    domains = set(DOMAINS) & set(value)
    if not domains:
        if len(value) == 1:   # {grid_serach: [...]} would be a constant: a misspelt domain
            [(key, args)] = value.items()
            near = did_you_mean(key, DOMAINS)
            if near is not None and isinstance(args, list):
                return [doc.problem(path + (key,), f"'{key}' is not a search domain: Tune would "
                                    f"take this mapping as a constant", near)]
        return [p for k, v in value.items() for p in _domain_problems(doc, v, path + (k,))]
    kind = sorted(domains)[0]
    if len(value) != 1:
        return [doc.problem(path, f"a search domain is a one-key mapping like {{{kind}: ...}}; "
                            f"found keys {', '.join(map(str, value))}")]
    args, where = value[kind], path + (kind,)
    if kind in LIST_DOMAINS:
        if not isinstance(args, list) or not args:
            return [doc.problem(where, f"{kind} needs a non-empty list of values")]
        return []
    if not (isinstance(args, list) and len(args) == 2
            and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)):
        return [doc.problem(where, f"{kind} needs [low, high], two numbers")]
    low, high = args
    if low >= high:
        return [doc.problem(where, f"{kind} needs low < high, got [{low}, {high}]")]
    if kind == "loguniform" and low <= 0:
        return [doc.problem(where, "loguniform needs low > 0")]
    if kind == "randint" and not all(isinstance(a, int) for a in args):
        return [doc.problem(where, "randint needs two integers")]
    return []


def _tune_problems(doc: Document, data: dict[str, Any]) -> list[Problem]:
    tune = data.get("tune")
    if not tune:
        return []
    problems = []
    for key in tune["param_space"]:
        if key not in TUNABLE_SECTIONS:
            problems.append(doc.problem(("tune", "param_space", key),
                                        f"'{key}' is not a trainer argument Tune can vary",
                                        did_you_mean(key, TUNABLE_SECTIONS)
                                        or "use one of: " + ", ".join(TUNABLE_SECTIONS)))
    problems += _domain_problems(doc, tune["param_space"], ("tune", "param_space"))
    config = tune.get("tune_config") or {}
    if ("metric" in config) != ("mode" in config):
        problems.append(doc.problem(("tune", "tune_config"), "give both 'metric' and 'mode' (or neither)"))
    if (config.get("scheduler") or {}).get("type") == "asha" and "metric" not in config:
        problems.append(doc.problem(("tune", "tune_config", "scheduler"), "the asha scheduler needs "
                                    "tune_config.metric and mode"))
    return problems


LABELLED = ("train", "valid")   # the splits the label column is read from
# What a path's suffix says its format is (a folder, or another suffix, says nothing).
SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".npy": "numpy",
                  ".parquet": "parquet", ".pq": "parquet"}


def suffix_format(path: str) -> str | None:
    """The format a path's suffix names, if it names one."""
    return SUFFIX_FORMATS.get(Path(path.rstrip("/")).suffix.lower())


def guess_format(path: str) -> str:
    """A dataset's format when its `format:` is left out: its suffix's, else parquet."""
    return suffix_format(path) or "parquet"


def _format_problems(doc: Document, name: str, dataset: dict[str, Any]) -> list[Problem]:
    """`format:` that the path's own suffix contradicts (an images listing is a CSV or
    parquet file: `_images_problems`)."""
    written = dataset.get("format")
    said = suffix_format(str(dataset["path"]))
    if written is None or said is None or written in (said, images.IMAGES):
        return []
    return [doc.problem(("datasets", name, "format"), f"format: {written}, but "
                        f"'{dataset['path']}' is a {said} file by its name",
                        f"write format: {said}, or leave format out: it is then taken from "
                        "the path's suffix")]


def _path_problems(doc: Document, data: dict[str, Any], base: Path, working_dir: Path) -> list[Problem]:
    problems = []
    if not holds(working_dir, Path.is_dir):
        problems.append(doc.problem(("working_dir",), f"'{working_dir}' is not a directory"))
    elif "train_loop" in data:
        module = data["train_loop"].split(":")[0].replace(".", "/")
        if not (holds(working_dir / f"{module}.py", Path.is_file)
                or holds(working_dir / module / "__init__.py", Path.is_file)):
            problems.append(doc.problem(("train_loop",), f"no module '{data['train_loop'].split(':')[0]}' "
                                        f"in working_dir {working_dir}"))
    storage = (data.get("run_config") or {}).get("storage_path")
    if isinstance(storage, str) and has_credentials(storage):
        problems.append(doc.problem(("run_config", "storage_path"), CREDENTIALS_MESSAGE,
                                    CREDENTIALS_HINT))
    problems += images.problems(doc, data, base)
    for name, dataset in (data.get("datasets") or {}).items():
        path = dataset["path"]
        problems += _format_problems(doc, name, dataset)
        if has_credentials(path):
            problems.append(doc.problem(("datasets", name, "path"), CREDENTIALS_MESSAGE,
                                        CREDENTIALS_HINT))
        elif not is_uri(path) and not holds(local(base, path)):
            problems.append(doc.problem(("datasets", name, "path"), f"'{path}' does not exist "
                                        f"(relative paths start at {base})"))
        elif not is_uri(path) and name in LABELLED and dataset.get("format") != images.IMAGES:
            problems += _label_problems(doc, data, name, dataset, local(base, path))
    return problems


def _label_problems(doc: Document, data: dict[str, Any], name: str, dataset: dict[str, Any],
                    path: Path) -> list[Problem]:
    """A `label_column` that a local dataset's header or schema does not have."""
    from .columns import columns

    label = data.get("label_column")
    fmt = dataset.get("format") or guess_format(str(dataset["path"]))
    if not isinstance(label, str) or not label:
        return []
    found = columns(path, fmt, dataset.get("read_options"))
    if found is None or label in found:
        return []
    shown = ", ".join(found[:20]) + (", ..." if len(found) > 20 else "")
    return [doc.problem(("label_column",), f"'{label}' is not a column of datasets.{name} "
                        f"({dataset['path']} has: {shown})", did_you_mean(label, found))]


def cluster_of(doc: Document, data: dict[str, Any], base: Path,
               here: bool = True) -> tuple[ClusterSpec | None, list[Problem]]:
    """The file's `cluster:` loaded (relative to `base`), or its problems as this file's."""
    if "cluster" not in data:
        return None, []
    path = local(base, data["cluster"])
    if isinstance(data["cluster"], str) and not holds(path, Path.is_file):
        what = "is a folder, not a cluster file" if holds(path, Path.is_dir) else "no such file"
        return None, [doc.problem(("cluster",), f"{what}: '{data['cluster']}' (relative "
                                  f"paths start at {base})",
                                  "name the cluster file the run goes to, or leave `cluster:` "
                                  "out to run on the embedded Ray")]
    try:
        return load_cluster(path, here=here), []
    except SpecError as exc:
        where = doc.problem(("cluster",), f"the cluster file {data['cluster']} is not valid "
                            f"(see the errors for {path})")
        return None, [where] + exc.problems


def _profiling_problems(doc: Document, data: dict[str, Any],
                        cluster: ClusterSpec | None) -> list[Problem]:
    """`profiling: true` with a cluster whose file does not turn it on: that Ray's dashboard
    refuses profiling whatever the experiment says."""
    if data.get("profiling") is not True or cluster is None or \
            cluster_settings.profiling(cluster.document):
        return []
    return [doc.problem(("profiling",), f"profiling on cluster {cluster.name} is its cluster "
                        f"file's setting, and {cluster.path.name} does not turn it on",
                        f"add `profiling: true` to {cluster.path} (`orchestrate up` then "
                        "restarts Ray on its head), or remove it here")]


def _storage_problems(doc: Document, data: dict[str, Any],
                      cluster: ClusterSpec | None) -> list[Problem]:
    """No storage_path, on a cluster that can have several nodes and names no `storage:`: each
    node would keep its checkpoints in its own ~/ray_results (Ray's default), and a run whose
    workers span nodes fails in Ray a minute in (WorkerGroupError). The embedded Ray and a
    one-node cluster keep Ray's default; a local storage_path is the user's word that every node
    mounts it."""
    from .. import providers

    if cluster is None or (data.get("run_config") or {}).get("storage_path") or \
            cluster_settings.storage(cluster.document):
        return []
    nodes = providers.most_nodes(cluster.document)
    if nodes < 2:
        return []
    return [doc.problem(("run_config",) if "run_config" in data else ("cluster",),
                        f"cluster {cluster.name} can have {nodes} nodes, and this run names no "
                        f"storage: each node would keep its checkpoints in its own "
                        f"~/ray_results (Ray's default), and a run on several nodes fails in "
                        f"Ray (WorkerGroupError)",
                        f"set run_config.storage_path: s3://... in the experiment, or "
                        f"storage: s3://... in the cluster file {cluster.path} for every run on "
                        f"it; a local path must be a folder every node mounts (NFS)")]


# The top-level keys each check reads: a check runs when the schema found none of them broken,
# so one pass reports the schema's errors and every check they leave standing.
PATH_KEYS = ("working_dir", "train_loop", "run_config", "datasets", "label_column")
ENVIRONMENT_KEYS = ("runtime_env", "working_dir", "cluster")


def build_experiment(doc: Document, path: Path, *, here: bool = True) -> ExperimentSpec:
    problems = schema_problems(doc, "experiment")
    broken = broken_keys(problems)
    if broken is None:
        raise SpecError(problems)

    def sound(*keys: str) -> bool:
        return not broken & set(keys)

    data, base = doc.data, path.resolve().parent
    working_dir = local(base, data.get("working_dir", ".")) if sound("working_dir") else base
    if sound(*load_schema("experiment")["properties"]):   # the trainer's checks read them all
        problems += _trainer_problems(doc, data)
    if sound("preprocessors"):
        problems += _preprocessor_problems(doc, data)
    if sound("tune"):
        problems += _tune_problems(doc, data)
    if sound(*PATH_KEYS):
        problems += _path_problems(doc, data, base, working_dir)
    if sound(*ENVIRONMENT_KEYS):
        problems += environment.problems(doc, base, working_dir, remote="cluster" in data)
    cluster = None
    if sound("cluster"):
        cluster, cluster_problems = cluster_of(doc, data, base, here)
        problems += cluster_problems
        if sound("profiling"):
            problems += _profiling_problems(doc, data, cluster)
        if sound("run_config"):
            problems += _storage_problems(doc, data, cluster)
        if sound("own_cluster", "runtime_env", "tracking"):
            problems += _own_cluster_problems(doc, data, cluster)
    if problems:
        raise SpecError(problems)
    return ExperimentSpec(path=path, name=data["name"], trainer=data["trainer"], document=data,
                          working_dir=working_dir, cluster=cluster, source=doc,
                          environment=environment.resolve(doc, base, working_dir))


def _own_cluster_problems(doc: Document, data: dict[str, Any],
                          cluster: ClusterSpec | None) -> list[Problem]:
    """A cluster of its own is a RayJob: KubeRay makes the cluster from the cluster file."""
    if "own_cluster" not in data:
        return []
    from .. import launch

    if cluster is None or launch.Feature.JOB_ON_OWN_CLUSTER not in launch.features(cluster.provider):
        return [doc.problem(("own_cluster",), "own_cluster needs a KubeRay cluster file in "
                            "`cluster` (provider type kuberay): the run becomes a RayJob")]
    found = []
    secrets = [name for name, value in (environment.section(data).get("env_vars") or {}).items()
               if isinstance(value, dict)]
    for key in ([("runtime_env", "env_vars", secrets[0])] if secrets else []) + \
            ([("tracking",)] if data.get("tracking") else []):
        found.append(doc.problem(key, "a RayJob cannot carry secrets (from_env) or tracking "
                                 "yet", "run it on the cluster (remove own_cluster), or leave "
                                 "them out"))
    return found


def load_experiment(path: str | Path, *, here: bool = True) -> ExperimentSpec:
    path = Path(path)
    return build_experiment(load_file(path), path, here=here)
