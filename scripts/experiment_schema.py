"""The experiment schema, as data. `python scripts/build_schemas.py` writes it to
schemas/experiment.schema.json (the file editors and CI use). The `trainer` enum and the
trainers' own fields (model, train_loop, data_loader, params, num_boost_round, ...) come from
the trainer registry (`orchestrator.trainers`)."""
from __future__ import annotations

from orchestrator import trainers

PREPROCESSORS = [
    "Categorizer", "Chain", "Concatenator", "FeatureHasher", "LabelEncoder", "MaxAbsScaler",
    "MinMaxScaler", "MultiHotEncoder", "Normalizer", "OneHotEncoder", "OrdinalEncoder",
    "PowerTransformer", "RobustScaler", "SimpleImputer", "StandardScaler", "Tokenizer",
]
DATASET_FORMATS = ["parquet", "csv", "json", "numpy", "images"]
NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        "x-message": "expected 1-64 letters, digits, '.', '-' or '_' (it names the Ray job "
                     "and the run's folder)"}
STR_LIST = {"type": "array", "items": {"type": "string"}, "minItems": 1}
POS_INT = {"type": "integer", "minimum": 1}


def _preprocessor() -> dict:
    return {
        "type": "object", "required": ["type"], "additionalProperties": False,
        "properties": {
            "type": {"type": "string", "enum": PREPROCESSORS},
            "columns": STR_LIST,
            "label_column": {"type": "string"},
            "output_column_name": {"type": "string"},
            "strategy": {"type": "string", "enum": ["mean", "most_frequent", "constant"]},
            "fill_value": {},
            "norm": {"type": "string", "enum": ["l1", "l2", "max"]},
            "power": {"type": "number"},
            "method": {"type": "string", "enum": ["yeo-johnson", "box-cox"]},
            "num_features": POS_INT,
            "max_categories": {"type": "object"},
            "preprocessors": {"type": "array", "items": {"$ref": "#/definitions/preprocessor"}},
        },
    }


def build() -> dict:
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://orchestrate.dev/schemas/experiment.schema.json",
        "title": "orchestrate experiment (a Ray Train run)",
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "trainer"],
        "definitions": {"preprocessor": _preprocessor()},
        "properties": {
            "name": NAME,
            "cluster": {"type": "string", "minLength": 1,
                        "description": "path to a cluster YAML; omitted: the embedded Ray (on this machine)"},
            "own_cluster": {
                "type": "object", "additionalProperties": False, "required": ["package_store"],
                "description": "run on a cluster of its own, made from the `cluster` file (a "
                               "KubeRay cluster) for this run and deleted after it: a RayJob",
                "properties": {
                    "package_store": {
                        "type": "string", "pattern": "^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?|"
                                                     "gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?|"
                                                     "file:///.*)$",
                        "x-message": "expected s3://bucket/prefix, gs://bucket/prefix or "
                                     "file:///folder",
                        "description": "where `run` puts the job's code (its working_dir and "
                                       "orchestrate's package, as zip files named by their "
                                       "content) for the cluster to fetch: KubeRay's submitter "
                                       "cannot reach this machine"},
                    "delete_after_seconds": {
                        "type": "integer", "minimum": 0, "default": 0,
                        "description": "how long the cluster stays after the job succeeds"},
                    "keep_failed_seconds": {
                        "type": "integer", "minimum": 0, "default": 3600,
                        "description": "how long the cluster of a failed job stays, to look "
                                       "into (its head's logs and dashboard)"},
                }},
            "trainer": {"type": "string", "enum": trainers.names()},
            "profiling": {"type": "boolean", "default": False, "description": (
                "the embedded Ray starts with its dashboard's profiling on (CPU flame graphs, "
                "stack traces, memory profiles of running workers: `orchestrate profile`); a "
                "cluster has it when its cluster file says `profiling: true`")},
            **trainers.schema_properties(),
            "working_dir": {"type": "string", "minLength": 1},
            "runtime_env": runtime_env(),
            "datasets": {
                "type": "object", "minProperties": 1, "additionalProperties": False,
                "patternProperties": {"^[A-Za-z][A-Za-z0-9_]*$": {
                    "type": "object", "required": ["path"], "additionalProperties": False,
                    "properties": {
                        "format": {"type": "string", "enum": DATASET_FORMATS},
                        "path": {"type": "string", "minLength": 1},
                        "read_options": {"type": "object"},
                        "cache": {"enum": [True, False, "auto"],
                                  "x-message": "expected true, false or auto (cache the "
                                               "preprocessed split in Ray's object store)"},
                    }}},
            },
            "label_column": {"type": "string", "minLength": 1},
            "feature_columns": STR_LIST,
            "preprocessors": {"type": "array", "items": {"$ref": "#/definitions/preprocessor"}},
            "train_loop_config": {"type": "object"},
            "scaling_config": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "num_workers": POS_INT,
                    "use_gpu": {"type": "boolean"},
                    "resources_per_worker": {"type": "object",
                                             "additionalProperties": {"type": "number", "minimum": 0}},
                    "placement_strategy": {"type": "string",
                                           "enum": ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]},
                },
            },
            "run_config": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "name": NAME,
                    "storage_path": {"type": "string", "minLength": 1},
                    "checkpoint_config": {
                        "type": "object", "additionalProperties": False,
                        "properties": {
                            "num_to_keep": {"type": ["integer", "null"], "minimum": 1},
                            "checkpoint_score_attribute": {"type": "string"},
                            "checkpoint_score_order": {"type": "string", "enum": ["max", "min"]},
                        }},
                    "failure_config": {
                        "type": "object", "additionalProperties": False,
                        "properties": {"max_failures": {"type": "integer", "minimum": -1}}},
                },
            },
            "tune": {
                "type": "object", "additionalProperties": False, "required": ["param_space"],
                "properties": {
                    "param_space": {"type": "object", "minProperties": 1},
                    "tune_config": {
                        "type": "object", "additionalProperties": False,
                        "properties": {
                            "metric": {"type": "string"},
                            "mode": {"type": "string", "enum": ["max", "min"]},
                            "num_samples": POS_INT,
                            "max_concurrent_trials": POS_INT,
                            "time_budget_s": {
                                "type": "number", "exclusiveMinimum": 0,
                                "description": "Ray Tune's time budget: the sweep ends after "
                                               "this many seconds, the trials running then "
                                               "stopped. With a cluster, `plan` estimates the "
                                               "sweep's cost from it."},
                            "scheduler": {
                                "type": "object", "required": ["type"], "additionalProperties": False,
                                "properties": {
                                    "type": {"type": "string", "enum": ["fifo", "asha"]},
                                    "max_t": POS_INT, "grace_period": POS_INT,
                                    "reduction_factor": {"type": "number", "exclusiveMinimum": 1},
                                    "time_attr": {"type": "string"},
                                }},
                        }},
                },
            },
            "tracking": {
                "type": "object", "additionalProperties": False, "required": ["mlflow"],
                "description": "every run logged to MLflow: parameters, per-epoch metrics, "
                               "the plot, summary and rendered experiment",
                "properties": {
                    "mlflow": {
                        "type": "object", "additionalProperties": False,
                        "properties": {
                            "tracking_uri": {
                                "type": "string", "minLength": 1,
                                "description": "a tracking server's http(s) URL, or a folder (a "
                                               "file store; relative to this file). Default: "
                                               "$MLFLOW_TRACKING_URI"},
                            "experiment_name": {
                                "type": "string", "minLength": 1,
                                "description": "MLflow's experiment; default: this one's name"},
                            "tags": {"type": "object", "additionalProperties": {
                                "type": ["string", "number", "boolean"]}},
                            "log_artifacts": {
                                "type": "boolean",
                                "description": "the plot, summary and rendered experiment as "
                                               "the run's artifacts (default: true)"},
                        }},
                },
            },
        },
    }


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def runtime_env() -> dict:
    """Ray's runtime_env keys an experiment may set (language/environment.py checks the rest)."""
    requirements = {"oneOf": [
        {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        {"type": "string", "minLength": 1,
         "description": "a requirements file, relative to the experiment file"}]}
    return {
        "type": "object", "additionalProperties": False,
        "properties": {
            "excludes": {**STR_LIST, "description": (
                "gitignore-style patterns, relative to working_dir, of files not to ship "
                "with the job (added to orchestrate's defaults)")},
            "pip": {**requirements, "description": (
                "Python packages installed for the job (Ray's runtime_env pip): requirement "
                "strings, or a requirements file relative to the experiment file")},
            "uv": {**requirements, "description": (
                "as pip, installed with uv (Ray's runtime_env uv; Ray pip-installs uv into the "
                "job's virtualenv where the nodes' Python lacks it)")},
            "env_vars": {
                "type": "object",
                "description": (
                    "environment variables of every process of the job: a plain value, or "
                    "{from_env: NAME}, a secret taken from the submitting machine's environment"),
                "propertyNames": {"pattern": ENV_NAME, "x-message": (
                    "expected an environment variable name (letters, digits and _, not "
                    "starting with a digit)")},
                "additionalProperties": {
                    "x-message": ("expected a string or a number (quote 'true' and 'false'), "
                                  "or {from_env: NAME}"),
                    "oneOf": [{"type": "string"}, {"type": "number"},
                              {"type": "object", "additionalProperties": False,
                               "required": ["from_env"],
                               "properties": {"from_env": {
                                   "type": "string", "pattern": ENV_NAME,
                                   "x-message": ("expected the name of a variable of this "
                                                 "machine's environment (letters, digits and "
                                                 "_, not starting with a digit), e.g. "
                                                 "'WANDB_API_KEY'")}}}]}},
            "config": {
                "type": "object", "additionalProperties": False,
                "description": "Ray's RuntimeEnvConfig",
                "properties": {
                    "setup_timeout_seconds": {
                        "oneOf": [{"type": "integer", "minimum": 1}, {"const": -1}],
                        "x-message": "expected whole seconds (1 or more), or -1 for no limit",
                        "description": ("how long Ray may take to set the environment up (pip "
                                        "install included); Ray's default 600, -1: no limit")},
                    "eager_install": {"type": "boolean"}}}}}
