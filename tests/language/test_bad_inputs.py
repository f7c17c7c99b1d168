"""A corpus of bad files (tests/language/bad/), each with the message the user must see.

Each case runs the real CLI in-process: it must exit 1, print no traceback, and name the file,
the line (where there is one), the field and what was expected.
"""
from pathlib import Path

import pytest

from orchestrator.cli import main

BAD = Path(__file__).parent / "bad"
REPO = Path(__file__).resolve().parents[2]

# file -> (line or None, field or "", words that must appear in the message)
CASES = {
    "malformed.yaml": (3, "", "not valid YAML"),
    # Issue 50: the indentation named in a syntax error; a key dedented out of its section
    "yaml-indented-under-nothing.yaml": (6, "", "not valid YAML: did not find expected key (check the indentation of line 6 against the lines above it"),
    "yaml-tab.yaml": (4, "", "(indent with spaces: YAML does not take tabs)"),
    "exp-key-out-of-its-section.yaml": (6, "hidden_dims", "unknown key 'hidden_dims' ('hidden_dims' is a field of 'model': indent it under model:)"),
    "empty.yaml": (None, "", "the file is empty"),
    "only-comment.yaml": (None, "", "holds no YAML document"),
    "top-level-list.yaml": (1, "", "expected a YAML mapping at the top level, found a list"),
    "top-level-scalar.yaml": (1, "", "expected a YAML mapping at the top level"),
    "duplicate-key.yaml": (5, "provider.region", "duplicate key 'region' (first written on line 4)"),
    "alias-bomb.yaml": (1, "", "aliases that expand this far are refused"),
    "binary.yaml": (None, "", "the file is binary"),
    "not-utf8.yaml": (None, "", "not UTF-8"),
    "python-tag.yaml": (2, "provider", "unsupported tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    "deeply-nested.yaml": (3, "auth[0][0]", "nested more than 100 levels"),
    "unknown-key.yaml": (2, "max_worker", "unknown key 'max_worker' (did you mean 'max_workers'?)"),
    "wrong-type.yaml": (2, "max_workers", "expected an integer, got string 'two'"),
    "negative-workers.yaml": (2, "max_workers", "must be >= 0, got integer -1"),
    "aws-no-region.yaml": (2, "provider.region", "missing 'region', required for provider type aws"),
    "gcp-zone-outside-region.yaml": (5, "provider.availability_zone",
                                     "zone 'europe-west4-a' is not in region 'us-west1'"),
    # Issue 32: the price of a GPU node counts on it (`up` crashed after launching)
    "gcp-accelerator-count.yaml": (15, "available_node_types.t4.node_config.guestAccelerators[0]"
                                   ".acceleratorCount", "must be a positive whole number, not 'two'"),
    "azure-no-resource-group.yaml": (2, "provider.resource_group",
                                     "missing 'resource_group', required for provider type azure"),
    "local-no-worker-ips.yaml": (2, "provider.worker_ips", "missing 'worker_ips'"),
    "local-with-node-types.yaml": (6, "head_node_type", "not supported by the local provider"),
    "local-max-below-min.yaml": (6, "max_workers", "max_workers 1 is below min_workers 2"),
    # Issue 29: the job API on the LAN would carry the token in clear.
    "local-dashboard-on-the-lan.yaml": (8, "head_start_ray_commands[1]",
                                        "--dashboard-host=0.0.0.0 would expose the dashboard"),
    "head-node-type-unknown.yaml": (6, "head_node_type", "'haed' is not a node type in available_node_types (head, worker) (did you mean 'head'?)"),
    "min-above-max.yaml": (6, "available_node_types.worker.min_workers",
                           "min_workers (4) is above max_workers (2)"),
    "min-sum-above-max-workers.yaml": (2, "max_workers",
                                       "min_workers add up to 4, above the cluster's max_workers (3)"),
    "removed-fields.yaml": (3, "head_node", "'head_node' was removed from Ray's cluster YAML"),
    "unsafe-cluster-name.yaml": (1, "cluster_name", "used in shell commands"),
    "unknown-provider.yaml": (2, "provider.type", "expected one of: aws, azure, gcp, kuberay, local"),
    "provider-type-list.yaml": (3, "provider.type", "expected a string, got a list"),
    "shorthand-and-node-types.yaml": (4, "available_node_types", "not both"),
    "unknown-kind.yaml": (1, "", "cannot tell what this file is"),
    "exp-unknown-trainer.yaml": (2, "trainer", "expected one of: lightgbm, tensorflow, torch, xgboost; got string 'pytorch' (did you mean 'torch'? torch is PyTorch)"),
    # Issue 50: another name for a value, a case slip, one not built yet
    "provider-type-kubernetes.yaml": (3, "provider.type", "got string 'kubernetes' (did you mean 'kuberay'? kuberay is Kubernetes, through KubeRay's operator)"),
    "provider-type-upper-case.yaml": (3, "provider.type", "got string 'AWS' (did you mean 'aws'? it is written in lower case)"),
    "provider-type-onprem.yaml": (3, "provider.type", "got string 'onprem' (did you mean 'local'? local is Ray's name for on-prem: hosts you name, reached over SSH)"),
    "exp-trainer-keras.yaml": (2, "trainer", "got string 'keras' (did you mean 'tensorflow'? tensorflow is TensorFlow with Keras)"),
    "exp-tensorflow-vit.yaml": (4, "model.name", "trainer tensorflow has no built-in model 'vit' (its models: mlp, cnn; or run your own training function with `train_loop:`)"),
    "exp-model-arg-typo.yaml": (3, "model.patch_sise", "unknown key 'patch_sise' (did you mean 'patch_size'?)"),
    "exp-vit-heads.yaml": (3, "model.hidden_dim", "hidden_dim (100) must be divisible by num_heads (8)"),
    "exp-model-and-loop.yaml": (4, "train_loop", "either 'model' or 'train_loop', not both"),
    "exp-bad-domain.yaml": (8, "tune.param_space.train_loop_config.lr.uniform", "uniform needs [low, high]"),
    "exp-format-contradicts-path.yaml": (6, "datasets.train.format", "format: parquet, but 's3://b/train.csv' is a csv file by its name (write format: csv, or leave format out"),
    "exp-format-images.yaml": (6, "datasets.train.format", "format: images needs a model that takes images, and this experiment has model mlp"),
    "exp-misspelt-domain.yaml": (8, "tune.param_space.train_loop_config.lr.grid_serach", "'grid_serach' is not a search domain: Tune would take this mapping as a constant (did you mean 'grid_search'?)"),
    "exp-bad-tune-section.yaml": (7, "tune.param_space.train_config",
                                  "not a trainer argument Tune can vary (did you mean 'train_loop_config'?)"),
    "exp-missing-dataset.yaml": (5, "datasets.train.path", "'no/such/file.csv' does not exist"),
    "exp-zero-workers.yaml": (5, "scaling_config.num_workers", "must be >= 1, got integer 0"),
    "exp-bad-cluster.yaml": (3, "cluster", "the cluster file unknown-key.yaml is not valid"),
    "exp-missing-cluster.yaml": (4, "cluster", "no such file: 'no/such/cluster.yaml' (relative paths start at"),
    "exp-xgboost-no-label.yaml": (None, "", "trainer xgboost needs 'label_column'"),
    "exp-unsafe-name.yaml": (1, "name", "it names the Ray job"),
    "exp-loop-module-missing.yaml": (3, "train_loop", "no module 'no_such_module'"),
    # Keys YAML reads as numbers, booleans or null: JSON (and jsonschema) know string keys only.
    "numeric-node-type.yaml": (5, "available_node_types.1", "the key integer 1 is not a string (quote it: '1')"),
    "null-key.yaml": (5, "available_node_types.null", "the key null is not a string"),
    "exp-boolean-key.yaml": (7, "train_loop_config.true", "YAML reads yes, no, on, off, true, false as booleans"),
    "file-mount-null.yaml": (4, "file_mounts./remote/data", "expected a local path, got null"),
    "ssh-user-unsafe.yaml": (4, "auth.ssh_user", "'ubuntu; touch /tmp/owned' is not a valid user name"),
    "null-sections.yaml": (4, "available_node_types.head", "expected a mapping, got null"),
    "provider-empty.yaml": (3, "provider", "expected a mapping, got null"),
    "booleans-for-strings.yaml": (3, "auth.ssh_user", "expected a string, got boolean true"),
    "exp-as-cluster.yaml": (1, "", "this is an experiment file, not a cluster file"),
    "exp-env-boolean.yaml": (8, "runtime_env.env_vars.FLAG",
                             "expected a string or a number (quote 'true' and 'false'), or "
                             "{from_env: NAME}, got boolean true"),
    "exp-env-reserved.yaml": (7, "runtime_env.env_vars.ORCHESTRATE_EXPERIMENT",
                              "ORCHESTRATE_EXPERIMENT is orchestrate's own variable"),
    "exp-env-bad-name.yaml": (7, "runtime_env.env_vars.my-var",
                              "expected an environment variable name"),
    "exp-pip-not-a-requirement.yaml": (8, "runtime_env.pip[1]",
                                       "; did you mean 'numpy==1.2'?)"),
    "exp-pip-and-uv.yaml": (7, "runtime_env.uv", "give either 'pip' or 'uv', not both"),
    "exp-requirements-missing.yaml": (6, "runtime_env.pip", "the requirements file "
                                      "'no-such-requirements.txt' does not exist"),
    "svc-zero-replicas.yaml": (3, "replicas", "must be >= 1, got integer 0"),
    "svc-unknown-experiment.yaml": (3, "model.experiment", "'no/such/experiment.yaml' does not exist"),
    "svc-replicas-and-autoscaling.yaml": (4, "autoscaling", "either 'replicas' or 'autoscaling', not both"),
    "svc-two-sources.yaml": (2, "model", "give exactly one of 'experiment', 'run'"),
    "svc-key-typo.yaml": (3, "replica", "unknown key 'replica' (did you mean 'replicas'?)"),
    "svc-bad-choice.yaml": (2, "model.checkpoint", "checkpoint is best or latest, not 'newest'"),
    "svc-bad-name.yaml": (1, "name", "expected a name of lower-case letters, digits and '-', starting with a letter, at most 63 long, e.g. 'cancer-model' (it names the Serve application), got string 'Bad_Name'"),
    "svc-route-prefix.yaml": (3, "route_prefix", "expected a URL path starting with '/', of letters, digits and . _ ~ / -, e.g. '/cancer', got string 'cancer'"),
}


def test_every_bad_file_has_a_case():
    assert sorted(p.name for p in BAD.iterdir()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_file_gives_a_clear_error(name, capsys):
    line, field, words = CASES[name]
    path = BAD / name
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    location = f"{path}:{line}" if line else str(path)
    errors = [line for line in err.splitlines() if line.startswith("ERROR")]
    expected = f"{location}:" if not field else f"{location}"
    matching = [line for line in errors
                if expected in line and words in line and (not field or f" {field}: " in line)]
    assert matching, f"no error line with {location!r}, {field!r} and {words!r} in:\n{err}"


def test_all_errors_in_a_file_are_reported_in_one_run(tmp_path, capsys):
    bad = tmp_path / "many.yaml"
    bad.write_text("cluster_name: many\nmax_worker: 1\nprovider: {type: aws, region: 5}\n"
                   "idle_timeout_minutes: soon\n")
    assert main(["validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "max_worker" in err and "provider.region" in err and "idle_timeout_minutes" in err


def test_errors_from_several_files_in_one_run(capsys):
    files = [str(BAD / "unknown-key.yaml"), str(BAD / "wrong-type.yaml")]
    assert main(["validate", *files]) == 1
    err = capsys.readouterr().err
    assert "unknown-key.yaml:2" in err and "wrong-type.yaml:2" in err
    assert "2 file(s) checked, 2 invalid" in err


def test_json_report_names_file_line_and_field(capsys):
    import json

    assert main(["validate", "--format", "json", str(BAD / "unknown-key.yaml")]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    (result,) = report["files"]
    (error,) = result["errors"]
    assert error["line"] == 2 and error["field"] == "max_worker"
    assert error["hint"] == "did you mean 'max_workers'?"


def test_missing_path_is_an_error(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 1
    assert "no such file or folder" in capsys.readouterr().err


def test_render_of_a_bad_file_exits_1_without_output(capsys):
    assert main(["render", str(BAD / "wrong-type.yaml")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "max_workers" in err


def test_misspelt_provider_key_is_a_warning_not_an_error(tmp_path, capsys):
    path = tmp_path / "typo.yaml"
    path.write_text("cluster_name: typo\nprovider:\n  type: aws\n  region: us-west-2\n"
                    "  availablity_zone: us-west-2a\n")
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert (f"WARNING {path}:5: provider.availablity_zone: 'availablity_zone' is not a key Ray "
            "reads; it is ignored (did you mean 'availability_zone'?)") in err


def test_cluster_commands_refuse_an_experiment_file(capsys):
    """`up`, `check` and `status` given an experiment say so, rather than list schema errors."""
    experiment = str(REPO / "experiments" / "quickstart.yaml")
    for args in (["up", experiment, "-y"], ["check", experiment], ["status", experiment]):
        assert main(args) == 1, args
        err = capsys.readouterr().err
        assert "this is an experiment file, not a cluster file" in err and "Traceback" not in err
        assert "missing required key" not in err


def test_every_pattern_of_a_file_kind_is_explained_in_words():
    """A value that fails a pattern gets the field's words (`x-message`, with an example),
    never a regular expression."""
    import json

    def patterns(node, path=""):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield path, node
            for key, value in node.items():
                yield from patterns(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from patterns(value, f"{path}[{i}]")

    for kind in ("cluster", "experiment", "service", "project"):
        schema = json.loads((REPO / "schemas" / f"{kind}.schema.json").read_text())
        bare = [path for path, node in patterns(schema)
                if not node.get("x-message")]
        assert not bare, f"{kind}: patterns without words: {bare}"


def test_a_projects_env_reference_outside_the_token_prefix_says_how_to_write_it(tmp_path, capsys):
    project = tmp_path / "orchestrate.yaml"
    project.write_text('project: p\ninclude: ["clusters/*.yaml"]\nsecrets: env://CI_\n')
    assert main(["validate", str(project)]) == 1
    err = capsys.readouterr().err
    assert f"{project}:3: secrets: expected file, env:// (only variables named " \
           "ORCHESTRATE_TOKEN_... are read: a prefix is written env://ORCHESTRATE_TOKEN_CI_)" in err
    assert "^(" not in err


@pytest.mark.parametrize("kind", ["csv", "parquet", "folder of csv"])
def test_a_label_column_the_local_data_lacks_is_named_with_its_columns(tmp_path, capsys, kind):
    if kind == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"a": [1], "target": [0]}), tmp_path / "train.parquet")
        path = "train.parquet"
    elif kind == "csv":
        (tmp_path / "train.csv").write_text("a,target\n1,0\n")
        path = "train.csv"
    else:
        (tmp_path / "train").mkdir()
        (tmp_path / "train" / "part-1.csv").write_text("a,target\n1,0\n")
        path = "train/"
    fmt = "" if kind == "csv" else ", format: csv" if kind == "folder of csv" else ""
    spec = tmp_path / "e.yaml"
    spec.write_text("name: e\ntrainer: torch\nmodel: {name: mlp, hidden_dims: [8], "
                    f"num_classes: 2}}\nlabel_column: targte\ndatasets:\n  train: {{path: {path}"
                    f"{fmt}}}\nscaling_config: {{num_workers: 1}}\n")
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:4: label_column: 'targte' is not a column of datasets.train ({path} has: " \
           "a, target) (did you mean 'target'?)" in err, err
    spec.write_text(spec.read_text().replace("targte", "target"))
    assert main(["validate", str(spec)]) == 0, capsys.readouterr().err


def test_schema_errors_and_the_checks_they_leave_standing_come_in_one_pass(tmp_path, capsys):
    """A misspelt key and a missing data file: both at once, not the second after the first
    is fixed. A check that reads a broken part is not run (it would only repeat it)."""
    spec = tmp_path / "e.yaml"
    spec.write_text("name: e\ntrainer: torch\nmodel: {name: mlp, hidden_dims: [8], "
                    "num_classes: 2}\nlabel_column: y\ndatasetz: 1\ndatasets:\n"
                    "  train: {path: missing.csv}\nscaling_config: {num_workers: 1}\n"
                    "tune: {param_space: {train_loop_config: {lr: {grid_serach: [1, 2]}}}, "
                    "num_samples: many}\n")
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:5: datasetz: unknown key 'datasetz' (did you mean 'datasets'?)" in err
    assert f"{spec}:7: datasets.train.path: 'missing.csv' does not exist" in err
    assert "tune.num_samples" in err and "grid_serach" not in err, err   # tune is broken: skipped


def test_a_clusters_warning_met_again_through_an_experiment_is_printed_once(tmp_path, capsys,
                                                                             monkeypatch):
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "lab.yaml").write_text(
        "cluster_name: lab\nprovider: {type: local, head_ip: 10.0.0.1, worker_ips: [10.0.0.2]}\n"
        "auth: {ssh_user: ray, ssh_private_key: no-such-key}\nstorage: s3://lab-results/runs\n")
    (tmp_path / "train.csv").write_text("a,target\n1,0\n")
    (tmp_path / "e.yaml").write_text(
        "name: e\ntrainer: torch\nmodel: {name: mlp, hidden_dims: [8], num_classes: 2}\n"
        "label_column: target\ndatasets: {train: {path: train.csv}}\n"
        "scaling_config: {num_workers: 1}\ncluster: clusters/lab.yaml\n")
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "."]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("WARNING")]
    assert len(warnings) == 1 and "ssh_private_key" in warnings[0], warnings


def test_a_label_column_is_looked_for_as_ray_data_would_read_the_file(tmp_path, capsys):
    """A byte-order mark before the header, a Hive partition folder's key (a column to Ray
    Data), a compressed CSV (not read here: nothing said) are no false alarms."""
    (tmp_path / "bom.csv").write_bytes("\ufefftarget,a\n0,1\n".encode())
    (tmp_path / "parts" / "target=0").mkdir(parents=True)
    (tmp_path / "parts" / "target=0" / "part-1.csv").write_text("a\n1\n")
    (tmp_path / "train.csv.gz").write_bytes(b"\x1f\x8b\x08\x00 not a header")
    spec = tmp_path / "e.yaml"
    for path in ("bom.csv", "parts/", "train.csv.gz"):
        spec.write_text("name: e\ntrainer: torch\nmodel: {name: mlp, hidden_dims: [8], "
                        f"num_classes: 2}}\nlabel_column: target\ndatasets:\n  train: {{path: {path}"
                        ", format: csv}\nscaling_config: {num_workers: 1}\n")
        assert main(["validate", str(spec)]) == 0, (path, capsys.readouterr().err)


def test_a_cluster_that_names_a_folder_says_so(tmp_path, capsys):
    (tmp_path / "clusters").mkdir()
    spec = tmp_path / "e.yaml"
    spec.write_text("name: e\ntrainer: torch\ncluster: clusters\nmodel: {name: mlp, hidden_dims: [8], "
                    "num_classes: 2}\nlabel_column: y\ndatasets:\n  train: {path: s3://b/t.csv}\n"
                    "scaling_config: {num_workers: 1}\n")
    assert main(["validate", str(spec)]) == 1
    assert f"{spec}:3: cluster: is a folder, not a cluster file: 'clusters'" in capsys.readouterr().err


def test_a_tab_inside_a_value_is_not_taken_for_a_tab_indent(tmp_path, capsys):
    spec = tmp_path / "c.yaml"
    spec.write_text('cluster_name: "a\tb"\nprovider: {type: local\nhead_ip: x\n')
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    assert ":3:8: not valid YAML: did not find expected" in err, err
    assert "indent with spaces" not in err, err


def test_a_key_that_is_no_string_stops_the_checks_that_read_what_the_schema_did_not_see(tmp_path, capsys):
    """benchmarks/fuzz.py found it: with a `null:` key the schema is not checked, so a string
    `preprocessors` reached the preprocessor check (a TypeError, exit 3)."""
    spec = tmp_path / "e.yaml"
    spec.write_text("name: e\ntrainer: torch\nmodel: {name: mlp, hidden_dims: [8], num_classes: 2,"
                    " null: 1}\nlabel_column: y\npreprocessors: '#/'\ndatasets:\n"
                    "  train: {path: s3://b/t.csv}\nscaling_config: {num_workers: 1}\n")
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:3: model.null: the key null is not a string" in err and "bug" not in err, err
