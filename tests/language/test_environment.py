"""The experiment's `runtime_env:` (pip/uv, env_vars, config): checked with file, line and field,
resolved into the job's runtime_env, and in the submission id (secrets by name, never by value).
The bad-file corpus (tests/language/bad/exp-env-*, exp-pip-*) covers the one-line mistakes."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.experiment import load_experiment
from orchestrator.render.experiment import render_job, ship
from orchestrator.run.experiment import check_environment

LOOP = "def train_loop_per_worker(config):\n    pass\n"


def write(folder: Path, runtime_env: dict, **extra) -> Path:
    """A user-loop experiment in `folder` (working_dir `loop/`) with this runtime_env."""
    (folder / "loop").mkdir(parents=True, exist_ok=True)
    (folder / "loop" / "train.py").write_text(LOOP)
    document = {"name": "env", "trainer": "torch", "working_dir": "loop",
                "train_loop": "train:train_loop_per_worker", "runtime_env": runtime_env, **extra}
    path = folder / "env.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def errors(path: Path, capsys) -> list[str]:
    assert main(["validate", str(path)]) == 1
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("ERROR")]


def test_a_requirements_file_is_read_relative_to_the_experiment(tmp_path):
    (tmp_path / "requirements.txt").write_text(
        "# pinned for the job\n\ntimm==1.0.3  # the models\n--index-url https://example.org/simple\n"
        "pkg @ https://example.org/pkg-1.0.tar.gz\n")
    spec = load_experiment(write(tmp_path, {"pip": "requirements.txt"}))
    assert spec.environment.installer == "pip"
    assert spec.environment.packages == ("timm==1.0.3", "--index-url https://example.org/simple",
                                         "pkg @ https://example.org/pkg-1.0.tar.gz")
    plan = render_job(spec, ship(spec))
    assert plan.runtime_env["pip"] == list(spec.environment.packages)


def test_a_bad_line_in_a_requirements_file_is_named_by_that_file_and_line(tmp_path, capsys):
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "job.txt").write_text("timm\n# fine\ntorch>=2 <<\n")
    found = errors(write(tmp_path, {"uv": "reqs/job.txt"}), capsys)
    [error] = found   # packaging's own reason in the brackets (its wording varies by version)
    assert error.startswith(f"ERROR   {tmp_path / 'reqs' / 'job.txt'}:3: runtime_env.uv: not a "
                            f"requirement: 'torch>=2 <<' (")
    assert error.endswith(")") and "did you mean" not in error
    (tmp_path / "reqs" / "job.txt").write_text("# nothing\n")
    assert errors(tmp_path / "env.yaml", capsys) == [
        f"ERROR   {tmp_path / 'env.yaml'}:6: runtime_env.uv: the requirements file "
        f"'reqs/job.txt' lists no requirements"]


def test_a_local_wheel_in_the_working_dir_is_found_where_ray_unpacks_it(tmp_path):
    path = write(tmp_path, {"pip": ["loop/wheels/own-0.1-py3-none-any.whl", "numpy  # pinned"]})
    wheel = tmp_path / "loop" / "wheels" / "own-0.1-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"first build")
    first = load_experiment(path)
    where = "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/wheels/own-0.1-py3-none-any.whl"
    assert first.environment.packages == (where, "numpy")
    [line, numpy] = render_job(first, ship(first)).runtime_env["pip"]
    assert numpy == "numpy"
    assert re.fullmatch(re.escape(where) + r" # sha256:[0-9a-f]{16}", line), line
    # A rebuilt wheel of the same name is a new requirement line: Ray's pip cache is keyed by
    # the lines' text.
    wheel.write_bytes(b"second build")
    second = load_experiment(path)
    assert render_job(second, ship(second)).runtime_env["pip"][0] != line


def test_a_project_folder_is_digested_as_shipped(tmp_path):
    """The working_dir itself (`./loop`) or a folder in it: the digest covers what the upload
    carries, so a cache file appearing changes neither the line nor the submission id."""
    path = write(tmp_path, {"pip": ["./loop", "loop/mylib"]})
    (tmp_path / "loop" / "mylib").mkdir()
    (tmp_path / "loop" / "mylib" / "pyproject.toml").write_text("[project]\nname = 'mylib'\n")
    spec = load_experiment(path)
    assert spec.environment.packages == ("${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}",
                                         "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/mylib")
    check_environment(spec)   # the whole working_dir is "in the upload"
    before = render_job(spec, ship(spec))
    (tmp_path / "loop" / "mylib" / "__pycache__").mkdir()
    (tmp_path / "loop" / "mylib" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    after = render_job(spec, ship(spec))
    assert after.runtime_env["pip"] == before.runtime_env["pip"]
    assert after.submission_id == before.submission_id
    (tmp_path / "loop" / "mylib" / "core.py").write_text("X = 1\n")
    changed = render_job(spec, ship(spec))
    assert changed.runtime_env["pip"][0] != before.runtime_env["pip"][0]   # ./loop holds it
    assert changed.runtime_env["pip"][1] != before.runtime_env["pip"][1]


def test_included_requirements_files_and_options(tmp_path, capsys):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "common.txt").write_text("numpy\n--find-links https://example.org/w\n")
    (tmp_path / "requirements.txt").write_text("-r base/common.txt\ntimm\n")
    spec = load_experiment(write(tmp_path, {"pip": "requirements.txt"}))
    assert spec.environment.packages == ("numpy", "--find-links https://example.org/w", "timm")

    (tmp_path / "base" / "common.txt").write_text("numpy\n\nbad req!!\n")
    [error] = errors(tmp_path / "env.yaml", capsys)   # named by the file that holds it
    assert error.startswith(f"ERROR   {tmp_path / 'base' / 'common.txt'}:3: runtime_env.pip: "
                            f"not a requirement: 'bad req!!'")
    (tmp_path / "requirements.txt").write_text("--requirement=base/nowhere.txt\n")
    assert errors(tmp_path / "env.yaml", capsys) == [
        f"ERROR   {tmp_path / 'requirements.txt'}:1: runtime_env.pip: the requirements file "
        f"'base/nowhere.txt' does not exist (relative paths start at {tmp_path})"]
    (tmp_path / "requirements.txt").write_text("-r requirements.txt\n")
    assert errors(tmp_path / "env.yaml", capsys) == [
        f"ERROR   {tmp_path / 'requirements.txt'}:1: runtime_env.pip: '-r requirements.txt' "
        f"includes a file already being read"]
    for option in ("-e ./lib", "--find-links wheels", "-c constraints.txt"):
        path = write(tmp_path, {"pip": ["numpy", option]})
        assert errors(path, capsys) == [
            f"ERROR   {path}:8: runtime_env.pip[1]: {option!r}: a local path in a pip option "
            f"does not reach the job's nodes; name the wheel, sdist or folder itself as a "
            f"requirement"], option


def test_a_bare_archive_name_is_a_file_not_a_package(tmp_path, capsys):
    """packaging reads `mylib-0.1.tar.gz` as a valid package name; pip reads it as a file."""
    path = write(tmp_path, {"pip": ["mylib-0.1.tar.gz"]})
    assert errors(path, capsys) == [
        f"ERROR   {path}:7: runtime_env.pip[0]: 'mylib-0.1.tar.gz': no such file or folder "
        f"(relative paths start at {tmp_path})"]
    (tmp_path / "mylib-0.1.tar.gz").write_bytes(b"sdist")
    [line] = load_experiment(path).environment.packages
    assert line.startswith(f"{tmp_path / 'mylib-0.1.tar.gz'} # sha256:")


def test_setup_timeout_is_seconds_or_no_limit(tmp_path, capsys):
    assert load_experiment(write(tmp_path, {"config": {"setup_timeout_seconds": -1}})) \
        .environment.config == {"setup_timeout_seconds": -1}
    path = write(tmp_path, {"config": {"setup_timeout_seconds": 0}})
    assert errors(path, capsys) == [
        f"ERROR   {path}:7: runtime_env.config.setup_timeout_seconds: expected whole seconds "
        f"(1 or more), or -1 for no limit, got integer 0"]


def test_local_paths_must_exist_and_reach_a_cluster(tmp_path, capsys):
    path = write(tmp_path, {"pip": ["./dist/missing-1.0.whl"]})
    assert errors(path, capsys) == [
        f"ERROR   {path}:7: runtime_env.pip[0]: './dist/missing-1.0.whl': no such file or folder "
        f"(relative paths start at {tmp_path})"]
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "missing-1.0.whl").write_bytes(b"wheel")
    spec = load_experiment(path)   # outside the working_dir: fine for the local Ray
    assert spec.environment.packages[0].startswith(f"{tmp_path / 'dist' / 'missing-1.0.whl'} #")
    cluster = Path(__file__).resolve().parents[2] / "cluster_configs" / "local.yaml"
    document = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**document, "cluster": str(cluster),   # three nodes
                                    "run_config": {"storage_path": "s3://b/runs"}},
                                   sort_keys=False))
    [error] = errors(path, capsys)
    assert error.startswith(f"ERROR   {path}:7: runtime_env.pip[0]: './dist/missing-1.0.whl' is "
                            f"outside the working_dir ({tmp_path / 'loop'}), so it does not "
                            f"reach the cluster")


def test_the_environment_is_in_the_runtime_env_and_the_submission_id(tmp_path, monkeypatch):
    base = {"pip": ["numpy"], "env_vars": {"MODE": "fast", "RETRIES": 3,
                                           "API_KEY": {"from_env": "CI_API_KEY"}},
            "config": {"setup_timeout_seconds": 900}}
    spec = load_experiment(write(tmp_path, base))
    plan = render_job(spec, ship(spec))
    env = plan.runtime_env
    assert env["pip"] == ["numpy"] and env["config"] == {"setup_timeout_seconds": 900}
    assert {k: env["env_vars"][k] for k in ("MODE", "RETRIES")} == {"MODE": "fast", "RETRIES": "3"}
    assert "API_KEY" not in env["env_vars"] and "CI_API_KEY" not in json.dumps(env)
    assert plan.secrets == {"API_KEY": "CI_API_KEY"}
    assert env["worker_process_setup_hook"] == "orchestrator.workload.worker.setup"

    def job_id(runtime_env: dict) -> str:
        changed = load_experiment(write(tmp_path, runtime_env))
        return render_job(changed, ship(changed)).submission_id

    same = plan.submission_id
    for value in ("one secret", "another secret"):   # the value is read at submission only
        monkeypatch.setenv("CI_API_KEY", value)
        assert job_id(base) == same
    changes = [{**base, "pip": ["numpy==2.0"]},
               {**base, "env_vars": {**base["env_vars"], "MODE": "slow"}},
               {**base, "env_vars": {**base["env_vars"], "API_KEY": {"from_env": "OTHER"}}},
               {**base, "config": {"setup_timeout_seconds": 60}}]
    ids = {job_id(change) for change in changes}
    assert len(ids) == len(changes) and same not in ids
    # Without the section nothing is added to the id (the golden files' ids are unchanged).
    bare = load_experiment(write(tmp_path, {}))
    assert bare.environment.public() == {}


def test_render_shows_a_placeholder_for_a_secret(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CI_API_KEY", "s3cret-value-9d1f")
    path = write(tmp_path, {"env_vars": {"API_KEY": {"from_env": "CI_API_KEY"}, "MODE": "x"}})
    assert main(["render", str(path), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "s3cret-value-9d1f" not in out
    shown = json.loads(out)
    assert shown["secrets"] == {"API_KEY": "<$CI_API_KEY at submission, shipped apart from "
                                           "env_vars>"}
    assert shown["runtime_env"]["env_vars"]["MODE"] == "x"
    assert "API_KEY" not in shown["runtime_env"]["env_vars"]


def test_an_unset_from_env_variable_does_not_fail_validate(tmp_path, monkeypatch, capsys):
    """`validate` runs on pull requests, where deployment secrets are usually absent; `run`
    refuses (tests/run/test_secrets.py)."""
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    path = write(tmp_path, {"env_vars": {"TOKEN": {"from_env": "NOT_SET_HERE"}}})
    assert main(["validate", str(path)]) == 0
    with pytest.raises(SpecError):
        load_experiment(write(tmp_path, {"env_vars": {"TOKEN": {"from_env": "lower-case"}}}))


def test_a_requirements_file_outside_the_experiment_is_refused_unread(tmp_path, capsys):
    """`pip: /proc/self/environ` printed the environment line by line; `/dev/zero` read until
    memory ran out. Both are refused before a byte is read, and nothing of them is echoed."""
    first = Path("/proc/self/environ").read_bytes().split(b"\0")[0].decode(errors="replace")
    for named in ("/proc/self/environ", "/dev/zero"):
        for runtime_env in ({"pip": named}, {"uv": ["numpy", f"-r {named}"]}):
            path = write(tmp_path, runtime_env)
            assert main(["validate", str(path)]) == 1
            err = capsys.readouterr().err
            [error] = [line for line in err.splitlines() if line.startswith("ERROR")]
            assert f"the requirements file '{named}' is outside the experiment's folder" in error
            assert error.startswith(f"ERROR   {path}:")
            assert "runtime_env." in error
            assert first not in err and "PATH=" not in err


def test_a_symlink_out_of_the_folder_is_refused(tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "reqs.txt").write_text("SECRET_VALUE=hunter2\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "requirements.txt").symlink_to(outside / "reqs.txt")
    [error] = errors(write(project, {"pip": "requirements.txt"}), capsys)
    assert "the requirements file 'requirements.txt' is outside the experiment's folder" in error
    assert "hunter2" not in error
    (project / "requirements.txt").unlink()   # a link that stays inside is followed
    (project / "loop" / "reqs.txt").write_text("numpy\n")
    (project / "requirements.txt").symlink_to(project / "loop" / "reqs.txt")
    assert load_experiment(project / "env.yaml").environment.packages == ("numpy",)


def test_a_requirements_file_that_is_not_a_small_regular_file_is_refused(tmp_path, capsys):
    import os

    (tmp_path / "big.txt").write_text("numpy\n" + "# padding\n" * 110_000)   # > 1 MiB
    [error] = errors(write(tmp_path, {"pip": "big.txt"}), capsys)
    assert error.endswith("runtime_env.pip: the requirements file 'big.txt' is larger than "
                          "1 MiB (requirements files are read whole)")
    os.mkfifo(tmp_path / "pipe.txt")   # would block a reader forever
    [error] = errors(write(tmp_path, {"pip": "pipe.txt"}), capsys)
    assert error.endswith("runtime_env.pip: the requirements file 'pipe.txt' is not a regular "
                          "file")
    (tmp_path / "binary.txt").write_bytes(b"numpy\n\xff\xfe secret\n")
    [error] = errors(write(tmp_path, {"pip": "binary.txt"}), capsys)
    assert error.endswith("runtime_env.pip: the requirements file 'binary.txt' is not UTF-8 "
                          "text") and "secret" not in error


def test_a_folder_outside_the_working_dir_must_be_a_package(tmp_path):
    """On the embedded Ray a local folder outside the working_dir is installed from where it
    is, after its files are digested: `/` (or any folder that is not a package) is refused
    instead of read whole."""
    from orchestrator.errors import SpecError

    path = write(tmp_path, {"pip": ["/"]})
    with pytest.raises(SpecError) as caught:
        load_experiment(path)
    (problem,) = caught.value.problems
    assert "not a package pip can install" in problem.message and problem.line
    lib = tmp_path / "outside" / "lib"
    lib.mkdir(parents=True)
    (lib / "setup.py").write_text("from setuptools import setup\nsetup(name='lib')\n")
    assert load_experiment(write(tmp_path, {"pip": [str(lib)]})).environment.packages
