"""Service YAML -> ServiceSpec: a run's checkpoint served over HTTP by Ray Serve.

    name: cancer-xgb
    cluster: ../cluster_configs/local.yaml        # omitted: the embedded Ray
    model: {experiment: ../experiments/xgboost-breast-cancer.yaml, checkpoint: best}
    route_prefix: /cancer                         # default /<name>
    replicas: 2                                   # or autoscaling: {min_replicas, max_replicas, ...}
    resources_per_replica: {cpus: 1, gpus: 0}
    max_ongoing_requests: 32
    batching: {max_batch_size: 32, batch_wait_timeout_s: 0.01}
    auth: token                                   # default; `auth: none` must be explicit
    demo: true                                    # a page at {route_prefix}/demo/ (default off)
    # demo: {app: "demo:build"}                   # or your own Gradio Blocks from the
                                                  # experiment's working_dir

`model` names exactly one of `experiment` (its latest run recorded here; `checkpoint: best |
latest`), `run` (a run folder or URI; the same choice) or `checkpoint` (a checkpoint folder or
URI). Relative paths start at the file's folder.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem, SpecError
from ..util.uris import CREDENTIALS_HINT, CREDENTIALS_MESSAGE, has_credentials, is_uri
from ..yamlload import Document, load_file
from .experiment import cluster_of, load_experiment
from .paths import holds, local
from .schema import schema_problems

if TYPE_CHECKING:
    from .cluster import ClusterSpec
    from .experiment import ExperimentSpec

CHOICES = ("best", "latest")


@dataclass(frozen=True)
class ServiceSpec:
    path: Path
    name: str
    document: dict[str, Any] = field(repr=False)
    route_prefix: str
    experiment: ExperimentSpec | None   # model.experiment, loaded
    source: str | None                  # model.run or model.checkpoint: absolute, or a URI
    checkpoint: str                     # best | latest (of a run), or "" for a checkpoint folder
    cluster: ClusterSpec | None = None  # None: the embedded Ray
    doc: Document | None = field(repr=False, compare=False, default=None)

    @property
    def http_port(self) -> int | None:
        """`http_port`: the port of Serve's proxy (None: the default, or one picked free)."""
        port = self.document.get("http_port")
        return int(port) if port is not None else None

    @property
    def demo(self) -> bool:
        """`demo`: a demo page beside the API (true, or the user's own app)."""
        return bool(self.document.get("demo"))

    @property
    def auth(self) -> str:
        """`auth`: "token" (the default: a bearer token per request) or "none"."""
        return str(self.document.get("auth", "token"))

    @property
    def package_store(self) -> str | None:
        """`package_store`: where a RayService's cluster fetches the code (KubeRay)."""
        store = self.document.get("package_store")
        return str(store) if store else None

    @property
    def demo_app(self) -> str | None:
        """`demo: {app: "module:function"}`: the user's own Gradio Blocks; None otherwise."""
        demo = self.document.get("demo")
        return str(demo["app"]) if isinstance(demo, dict) else None


def _local(base: Path, value: str) -> str:
    return value if is_uri(value) else str(local(base, value))


def _model(doc: Document, base: Path,
           here: bool) -> tuple[ExperimentSpec | None, str | None, str, list[Problem]]:
    model = doc.data["model"]
    secret = [k for k in ("run", "checkpoint") if isinstance(model.get(k), str)
              and has_credentials(model[k])]
    if secret:
        return None, None, "", [doc.problem(("model", k), CREDENTIALS_MESSAGE, CREDENTIALS_HINT)
                                for k in secret]
    named = [k for k in ("experiment", "run") if k in model]
    if len(named) > 1 or (not named and "checkpoint" not in model):
        return None, None, "", [doc.problem(("model",), "give exactly one of 'experiment', 'run' "
                                            "(with checkpoint: best or latest) or 'checkpoint' "
                                            "(a checkpoint folder)")]
    if not named:
        source = _local(base, model["checkpoint"])
        if not is_uri(source) and not holds(Path(source), Path.is_dir):
            return None, None, "", [doc.problem(("model", "checkpoint"),
                                                f"'{model['checkpoint']}' is not a folder")]
        return None, source, "", []
    which = model.get("checkpoint", "best")
    if which not in CHOICES:
        return None, None, "", [doc.problem(("model", "checkpoint"),
                                            f"with '{named[0]}', checkpoint is best or latest, "
                                            f"not {which!r}")]
    if named[0] == "run":
        return None, _local(base, model["run"]), which, []
    path = Path(_local(base, model["experiment"]))
    if not holds(path, Path.is_file):
        return None, None, "", [doc.problem(("model", "experiment"),
                                            f"'{model['experiment']}' does not exist "
                                            f"(relative paths start at {base})")]
    try:
        return load_experiment(path, here=here), None, which, []
    except SpecError as exc:
        return None, None, "", [doc.problem(("model", "experiment"),
                                            f"the experiment file {model['experiment']} is not "
                                            f"valid (see the errors for {path})"), *exc.problems]


def build_service(doc: Document, path: Path, *, here: bool = True) -> ServiceSpec:
    problems = schema_problems(doc, "service")
    if problems:
        raise SpecError(problems)
    data, base = doc.data, path.resolve().parent
    if "replicas" in data and "autoscaling" in data:
        problems.append(doc.problem(("autoscaling",), "give either 'replicas' or 'autoscaling', "
                                    "not both"))
    scaling = data.get("autoscaling") or {}
    if scaling and scaling["min_replicas"] > scaling["max_replicas"]:
        problems.append(doc.problem(("autoscaling", "min_replicas"),
                                    f"min_replicas ({scaling['min_replicas']}) is more than "
                                    f"max_replicas ({scaling['max_replicas']})"))
    if data.get("demo") and str(data.get("route_prefix", "/x")).rstrip("/") == "":
        problems.append(doc.problem(("route_prefix",), "the demo page needs a route of its own, "
                                    "not '/': its cookie would go to every web app on this host",
                                    "give a route_prefix such as /" + str(data["name"])))
    experiment, source, which, model_problems = _model(doc, base, here)
    if isinstance(data.get("demo"), dict) and "experiment" not in data["model"]:
        problems.append(doc.problem(("demo", "app"), "your own demo app is loaded from the "
                                    "experiment's working_dir: the model must name an "
                                    "experiment", "give model: {experiment: FILE}"))
    cluster, cluster_problems = cluster_of(doc, data, base, here)
    problems += model_problems + cluster_problems
    if experiment is not None and "cluster" not in data and experiment.cluster is not None:
        cluster = experiment.cluster  # the model lives where it was trained
    if problems:
        raise SpecError(problems)
    return ServiceSpec(path=path, name=data["name"], document=data,
                       route_prefix=data.get("route_prefix", f"/{data['name']}"),
                       experiment=experiment, source=source, checkpoint=which, cluster=cluster,
                       doc=doc)


def load_service(path: str | Path, *, here: bool = True) -> ServiceSpec:
    path = Path(path)
    return build_service(load_file(path), path, here=here)
