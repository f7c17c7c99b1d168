"""The job contract: what `orchestrate run` hands to the code that runs on the cluster, and what
that code hands back. Written by `render.experiment`, read by `workload` (on the cluster) and by
the jobs client (here); nothing else spells these names.

In:  the job's environment variable CONFIG_ENV holds the resolved configuration (`JobConfig`,
     JSON, with `version` CONFIG_VERSION); the entrypoint is ENTRYPOINT.
Out: one line per epoch, `EPOCH_MARK {json}` (a Tune trial's carries `"trial": id`), one per
     change of a Tune trial's state, `TRIAL_MARK {json}`, and at the end `RESULT_MARK {json}`
     (the run's summary; `{"status": "FAILED", "error": ...}` on failure), anywhere in a log
     line, since Ray prefixes lines printed by its actors. Files go to
     `<run folder>/RESULTS_FOLDER/`.
"""
from __future__ import annotations

import json
from typing import Any, Literal, NotRequired, TypedDict, cast

CONFIG_ENV = "ORCHESTRATE_EXPERIMENT"
CONFIG_VERSION = 1
WORKLOAD_MODULE = "orchestrator.workload"
# The job runs under the Python that Ray itself runs with: the one the `ray` command's shebang
# names. A login shell may put another `python` first (pyenv shims in ~/.bashrc), one without Ray.
# With `pip:` or `uv:` Ray runs the job in a virtualenv of its own under its runtime_resources
# (VIRTUAL_ENV, activated for the entrypoint) that may have no `ray` command: its Python, which
# sees Ray's packages, wins. Any other VIRTUAL_ENV (a user's, inherited by `ray start`) does not.
RAY_PYTHON = ('ray_python=$(sed -n "1s/^#![[:space:]]*//p" "$(command -v ray)" 2>/dev/null); '
              'case "$ray_python" in ""|*/sh|*/bash) ray_python=python;; esac; '
              'case "$VIRTUAL_ENV" in */runtime_resources/*) [ -x "$VIRTUAL_ENV/bin/python" ] && '
              'ray_python="$VIRTUAL_ENV/bin/python";; esac; ')
ENTRYPOINT = RAY_PYTHON + f"exec $ray_python -m {WORKLOAD_MODULE}"
# A RayJob's: KubeRay's submitter puts the entrypoint into a bash line unquoted, and `ray job
# submit` joins its words again with list2cmdline (Windows quoting): a shell line such as
# ENTRYPOINT's cannot survive both. In Ray's images `python` is the Python that runs Ray (and in a
# `pip:` runtime env, the virtualenv's, activated for the entrypoint).
IMAGE_ENTRYPOINT = f"python -m {WORKLOAD_MODULE}"
WORKER_SETUP = f"{WORKLOAD_MODULE}.worker.setup"   # runtime_env worker_process_setup_hook
# The experiment's secret variables reach the job as this module (one `VALUES` dict), shipped in
# py_modules beside orchestrate's package rather than in the runtime_env's env_vars, which Ray
# shows to anyone who may list jobs. The driver and every worker copy them into os.environ.
SECRETS_MODULE = "orchestrate_job_secrets"
SECRET_NAMES_ENV = "ORCHESTRATE_SECRET_NAMES"   # their names (comma-separated), in env_vars
TRIALS_ENV = "ORCHESTRATE_TRIALS_AT_ONCE"   # a sweep's trials at once, as reserved (run.needs)
EPOCH_MARK = "ORCHESTRATE_EPOCH "
TRIAL_MARK = "ORCHESTRATE_TRIAL "
RESULT_MARK = "ORCHESTRATE_RESULT "
MARKS_PATTERN = "ORCHESTRATE_(EPOCH|TRIAL|RESULT) "   # a regex matching any of the three
# `tracking.mlflow`: the credentials MLflow's client reads from its environment. Taken from the
# environment of `orchestrate run` when set there and shipped as the job's secrets.
MLFLOW_CREDENTIALS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                      "MLFLOW_TRACKING_PASSWORD")
MLFLOW_RUN_FILE = "mlflow.json"   # in the run's RESULTS_FOLDER: the MLflow run it logs to
RESULTS_FOLDER = "orchestrate"
WORKLOADS = ("train", "predict")
# What a training run leaves for prediction, in `<run folder>/RESULTS_FOLDER/`: the model card
# (JSON: model, features, label, classes) and the fitted preprocessor (Ray's own serialization).
MODEL_CARD = "model.json"
PREPROCESSOR_FILE = "preprocessor.bin"
CARD_VERSION = 1
PREDICTIONS_FOLDER = "predictions"          # `orchestrate predict --output DIR`: DIR/predictions/
PREDICT_SUMMARY = "predict_summary.json"    # and DIR/predict_summary.json
# `orchestrate serve`: the Serve application's builder and its one deployment, whose user_config
# is a `ServeUserConfig` (what changes without restarting a replica).
SERVE_IMPORT_PATH = f"{WORKLOAD_MODULE}.serving:build"
SERVE_DEPLOYMENT = "Predictor"

# `num_boost_round: null` (the boosting trainers, xgboost and lightgbm): this many rounds.
BOOST_ROUNDS = 10

# Search domains inside `tune.param_space`: one-key mappings, e.g. {loguniform: [1e-4, 1e-2]}.
# The first take a list of values; the others a [low, high] pair.
LIST_DOMAINS = ("grid_search", "choice")
RANGE_DOMAINS = ("uniform", "loguniform", "randint")
DOMAINS = LIST_DOMAINS + RANGE_DOMAINS


class ModelSection(TypedDict):
    name: str                       # a built-in model (workload.models.MODELS)
    args: dict[str, Any]


class DatasetSection(TypedDict, total=False):
    format: str                     # parquet | csv | json | numpy | images
    path: str                       # URI, absolute, or relative to the job's working_dir
    written: str                    # the path as the experiment file gives it (relative to the
                                    # file, or the URI): what the run's parameters name
    read_options: dict[str, Any]
    cache: bool | Literal["auto"]   # materialise the preprocessed split in the object store
    classes: list[str]              # images: the train split's class names, sorted (found by
                                    # the job's driver, `workload.images.with_image_classes`)
    image_size: int | None          # images: the side they are resized to (the model's)


class _ScalingRequired(TypedDict):
    num_workers: int
    use_gpu: bool
    resources_per_worker: dict[str, float] | None


class ScalingSection(_ScalingRequired, total=False):
    placement_strategy: str         # PACK (Ray's default) | SPREAD | STRICT_PACK | STRICT_SPREAD


class RunSection(TypedDict, total=False):
    name: str
    storage_path: str | None        # absolute or a URI; None: Ray's default (~/ray_results)
    checkpoint_config: dict[str, Any] | None
    failure_config: dict[str, Any] | None


class TuneSection(TypedDict):
    param_space: dict[str, Any]
    tune_config: dict[str, Any]


class TrackingSection(TypedDict):
    """`tracking.mlflow`, resolved: where the run is logged and what identifies its source."""
    tracking_uri: str               # a server URL, or an absolute path / file: URI (a file store)
    experiment_name: str
    tags: dict[str, str]
    log_artifacts: bool
    experiment_file: str            # the experiment YAML, absolute
    experiment_sha256: str          # of its bytes
    orchestrate_version: str


class _JobConfigOptional(TypedDict, total=False):
    tracking: TrackingSection | None   # absent: not tracked (and in configs from before tracking)


class JobConfig(_JobConfigOptional):
    version: int
    workload: str
    name: str
    trainer: str                    # a registered trainer (orchestrator.trainers)
    model: ModelSection | None
    train_loop: str | None          # "module:function", importable from working_dir
    data_loader: str                # ray_data | torch
    datasets: dict[str, DatasetSection]
    label_column: str | None
    feature_columns: list[str] | None
    preprocessors: list[dict[str, Any]]
    train_loop_config: dict[str, Any]
    scaling_config: ScalingSection
    run_config: RunSection
    params: dict[str, Any] | None   # the boosting trainers' (xgboost, lightgbm) parameters
    num_boost_round: int | None     # theirs too; None: BOOST_ROUNDS
    tune: TuneSection | None
    resume: bool


class SourceSection(TypedDict):
    path: str                       # a run folder or a checkpoint folder (absolute or a URI)
    checkpoint: Literal["best", "latest"]


class OutputSection(TypedDict):
    path: str                       # a folder (absolute or a URI): predictions/ and the summary
    format: Literal["parquet", "csv", "json"]


class PredictConfig(TypedDict):
    """`workload: predict`: batch prediction with a run's checkpoint over a dataset."""
    version: int
    workload: str
    name: str
    source: SourceSection
    data: DatasetSection
    output: OutputSection
    batch_size: int
    workers: int                    # actors in the pool, each loading the model once
    gpus: float                     # per actor
    keep_columns: list[str] | None  # None: every input column but images
    evaluate: bool


class ServeUserConfig(TypedDict):
    checkpoint: str                 # the checkpoint folder (absolute or a URI)
    auth: str                       # "token" or "none"; anything else, or no key: every route refused
    token_sha256: str | None        # with auth "token": the token's SHA-256 (64 hex digits)
    max_batch_size: int
    batch_wait_timeout_s: float
    use_gpu: bool
    demo: NotRequired[bool]         # the demo page (`workload.demo_app`); absent: off
    demo_app: NotRequired[str]      # with demo: the user's Blocks, "module:function"
    demo_sha256: NotRequired[str]   # with demo and auth "token": the page cookie's secret's SHA-256


class ContractError(ValueError):
    """The configuration does not follow this contract (another orchestrate version sent it)."""


def encode(config: JobConfig | PredictConfig) -> str:
    return json.dumps(config, sort_keys=True)


def decode(text: str | None) -> dict[str, Any]:
    """The configuration, its version and workload checked; `workload` says which TypedDict
    (`JobConfig` for train, `PredictConfig` for predict) the rest follows."""
    if not text:
        raise ContractError(f"{CONFIG_ENV} is not set: this is the entrypoint of an orchestrate "
                            f"job, started by `orchestrate run`")
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != CONFIG_VERSION:
        found = data.get("version") if isinstance(data, dict) else None
        raise ContractError(f"unsupported config version {found!r} (this orchestrate reads "
                            f"version {CONFIG_VERSION}); submit with the same orchestrate version "
                            f"the cluster runs")
    workload = data.setdefault("workload", "train")  # version 1 before workloads: training
    if workload not in WORKLOADS:
        raise ContractError(f"unknown workload {workload!r}; this orchestrate runs "
                            f"{', '.join(WORKLOADS)}")
    return cast(dict[str, Any], data)  # version and workload checked above; the fields are render's


def epoch_line(row: dict[str, Any]) -> str:
    return EPOCH_MARK + json.dumps(row)


def result_line(summary: dict[str, Any]) -> str:
    return RESULT_MARK + json.dumps(summary, default=str)


def _marked(line: str, mark: str) -> dict[str, Any] | None:
    index = line.find(mark)
    if index < 0:
        return None
    try:
        value = json.loads(line[index + len(mark):])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_epoch(line: str) -> dict[str, Any] | None:
    """The metrics of an epoch line, or None for any other line."""
    return _marked(line, EPOCH_MARK)


def trial_line(state: dict[str, Any]) -> str:
    return TRIAL_MARK + json.dumps(state, default=str)


def parse_trial(line: str) -> dict[str, Any] | None:
    """A Tune trial's state line ({"trial", "state", "config"}), or None for any other line."""
    return _marked(line, TRIAL_MARK)


def is_result_line(line: str) -> bool:
    return RESULT_MARK in line


def parse_result(log: str) -> dict[str, Any] | None:
    """The job's summary: the last well-formed result line of its log, if any."""
    found = None
    for line in log.splitlines():
        value = _marked(line, RESULT_MARK)
        if value is not None:
            found = value
    return found
