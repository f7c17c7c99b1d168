"""The CLI as users and pipelines meet it: exit codes, speed-critical imports, packaging."""
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator import __version__, cli, trainers
from orchestrator.cli import main
from orchestrator.language.schema import load_schema
from orchestrator.providers import PROVIDERS

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("ray", "torch", "boto3", "botocore", "google", "azure", "xgboost", "pandas", "pyarrow")


def test_every_example_validates(capsys):
    folders = ("cluster_configs", "experiments", "services")
    assert main(["validate", *(str(REPO / folder) for folder in folders)]) == 0
    out, err = capsys.readouterr()
    # every YAML file in them, each once, as the kind its folder holds; nothing else
    kinds = {"cluster_configs": "cluster", "experiments": "experiment", "services": "service"}
    expected = sorted((str(path), kinds[folder]) for folder in folders
                      for path in (REPO / folder).glob("*.yaml"))
    assert len(expected) == 19   # with experiments/quickstart-kuberay.yaml and keras-loop.yaml
    assert sorted(re.findall(r"^ok +(\S+) \((\w+)\)$", out, re.MULTILINE)) == expected
    assert err.splitlines()[-1] == f"{len(expected)} file(s) checked"


def test_validate_and_render_import_nothing_heavy():
    code = (
        "import sys\n"
        "from orchestrator.cli import main\n"
        "for args in (['validate', 'cluster_configs', 'experiments', 'services'],\n"
        "             ['render', 'cluster_configs/aws-gpu.yaml'],\n"
        "             ['render', 'experiments/quickstart.yaml']):\n"
        "    assert main(args) == 0, args\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "HEAVY=\n" in result.stderr, result.stderr


def test_schemas_are_generated_from_ray_and_the_registry():
    pytest.importorskip("ray")
    result = subprocess.run([sys.executable, "scripts/build_schemas.py", "--check"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    enum = load_schema("cluster")["properties"]["provider"]["properties"]["type"]["enum"]
    assert enum == sorted(PROVIDERS)
    # the trainer enum and the trainers' fields too (orchestrator.trainers)
    experiment = load_schema("experiment")["properties"]
    assert experiment["trainer"]["enum"] == trainers.names()
    for name, schema in trainers.schema_properties().items():
        assert experiment[name] == schema, name


def test_unexpected_errors_become_exit_3_with_a_log(monkeypatch, capsys):
    from orchestrator.commands import validate

    def boom(path):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(validate, "validate_file", boom)
    assert main(["validate", str(REPO / "cluster_configs/gcp.yaml")]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "a bug in orchestrate" in err
    log = Path(err.split("details in ")[1].strip())
    text = log.read_text()
    log.unlink()
    assert "simulated bug" in text
    first, second = text.splitlines()[:2]
    assert first.startswith(f"orchestrate {__version__}, Python {sys.version.split()[0]} ")
    assert "Linux" in first  # the platform
    assert second == "command: orchestrate validate (arguments not recorded)"


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate"])
    assert exc.value.code == 2


def test_wheel_ships_the_schemas_and_works_installed(tmp_path):
    """A non-editable install must find the schemas inside the package."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(REPO)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("orchestrate_ray-*.whl")   # the distribution's name
    names = zipfile.ZipFile(wheel).namelist()
    (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    assert "\nName: orchestrate-ray\n" in zipfile.ZipFile(wheel).read(metadata).decode()
    assert "orchestrator/schemas/cluster.schema.json" in names
    assert "orchestrator/schemas/experiment.schema.json" in names
    assert "orchestrator/py.typed" in names  # the package is typed (mypy strict)
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", "--format", "json",
         str(REPO / "cluster_configs/gcp.yaml")],
        cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["valid"] is True
    # `orchestrate schema` prints the packaged copy: an editor gets it without the source tree
    printed = subprocess.run(
        [sys.executable, "-m", "orchestrator", "schema", "service"], cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (REPO / "schemas/service.schema.json").read_text()
    code = "import orchestrator.language.schema as s; print(s.schema_dir())"
    where = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                           text=True, env={"PYTHONPATH": str(target)}).stdout.strip()
    assert where.startswith(str(target))


@pytest.mark.parametrize("args", [["up", "c.yaml", "--timeout", "nan"],
                                  ["up", "c.yaml", "--wait-timeout", "0"],
                                  ["down", "--timeout", "-1"], ["down", "--timeout", "soon"]])
def test_time_limits_must_be_positive_seconds(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert "expected a number of seconds above 0" in capsys.readouterr().err


def test_the_verb_is_found_after_global_options(monkeypatch):
    assert cli.chosen_verb(["up", "c.yaml", "-y"]) == "up"
    assert cli.chosen_verb(["--version"]) is None
    assert cli.chosen_verb(["validate", "--format", "json", "run"]) == "validate"
    assert cli.chosen_verb(["nonsense", "up"]) is None  # argparse then names the bad verb
    # A global option that takes a value (the next one added, e.g. --project FILE) is skipped
    # with its value, whether given as two words or with "=", and the verb after it is found.
    monkeypatch.setitem(cli.GLOBAL_OPTIONS, "--project", True)
    assert cli.chosen_verb(["--project", "jobs", "up", "c.yaml"]) == "up"
    assert cli.chosen_verb(["--project=jobs", "status"]) == "status"
    assert cli.chosen_verb(["--project"]) is None


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"orchestrate {__version__}"
    # the installed command, as a user runs it
    done = subprocess.run([str(Path(sys.executable).parent / "orchestrate"), "--version"],
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"orchestrate {__version__}\n", "")


def test_a_command_that_needs_the_ray_extra_says_so_without_it(tmp_path):
    """Without filelock/psutil (the `ray` extra), a command that locks says which pip install
    to run, exit 1, instead of crashing with exit 3."""
    code = ("import sys\n"
            "sys.modules['filelock'] = None  # as if not installed\n"
            "from orchestrator.cli import main\n"
            "sys.exit(main(['stop', '--local-ray']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "ORCHESTRATE_HOME": str(tmp_path)})
    assert done.returncode == 1, done.stderr
    assert "'filelock', which is not installed" in done.stderr
    assert 'pip install "orchestrate-ray[ray]"' in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--help", "run"], ["-h", "validate", "x.yaml"]])
def test_help_before_a_verb_lists_every_command(argv, capsys):
    """A command line with its verb builds that verb's parser alone (a fast start); help asked
    before the verb still lists them all."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert all(verb in shown for verb in ("validate", "run", "apply", "force-unlock")), shown


def test_help_after_a_verb_is_that_verbs(capsys):
    with pytest.raises(SystemExit) as done:
        main(["validate", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: orchestrate validate") and "--format" in shown
