"""Secrets and local requirements at submission: what `orchestrate run` refuses before any Ray
starts, and the module that carries secret values to the job (its file, its removal). The job
side, on a real local Ray, is tests/workload/test_environment.py."""
from __future__ import annotations

import importlib.util
import stat
from pathlib import Path

import yaml

from orchestrator import contract
from orchestrator.cli import main
from orchestrator.run.secrets import shipped


def experiment(folder: Path, runtime_env: dict) -> Path:
    (folder / "loop").mkdir(parents=True, exist_ok=True)
    (folder / "loop" / "train.py").write_text("def train_loop_per_worker(config):\n    pass\n")
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "secrets", "trainer": "torch", "working_dir": "loop",
                                    "train_loop": "train:train_loop_per_worker",
                                    "runtime_env": runtime_env}, sort_keys=False))
    return path


def test_run_refuses_an_unset_from_env_variable_before_starting_anything(tmp_path, monkeypatch,
                                                                           capsys):
    monkeypatch.delenv("DEPLOY_TOKEN", raising=False)
    path = experiment(tmp_path, {"env_vars": {"TOKEN": {"from_env": "DEPLOY_TOKEN"}}})
    assert main(["run", str(path)]) == 1
    out, err = capsys.readouterr()
    assert f"ERROR   {path}:8: runtime_env.env_vars.TOKEN.from_env: DEPLOY_TOKEN is not set in " \
           f"this environment" in err
    assert "Traceback" not in out + err
    assert "embedded Ray" not in out + err and "submitted" not in out + err   # nothing was started


def test_run_refuses_a_wheel_the_upload_leaves_out(tmp_path, capsys):
    path = experiment(tmp_path, {"pip": ["loop/wheels/own-0.1-py3-none-any.whl"]})
    (tmp_path / "loop" / "wheels").mkdir()
    (tmp_path / "loop" / "wheels" / "own-0.1-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "loop" / ".gitignore").write_text("wheels/\n")   # as many projects have
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"ERROR   {path}:7: runtime_env.pip[0]: wheels/own-0.1-py3-none-any.whl is left out of " \
           f"the working_dir's upload, so the job cannot install it" in err
    assert "embedded Ray" not in err


def test_secret_values_travel_in_a_private_module_that_is_removed_after(tmp_path):
    runtime_env = {"py_modules": ["/somewhere/orchestrator"], "env_vars": {"PLAIN": "1"}}
    environ = {"CI_KEY": "it's \"quoted\"\nand\\multi-line", "OTHER": "x"}
    with shipped(runtime_env, {"API_KEY": "CI_KEY"}, environ) as sent:
        assert sent["env_vars"] == {"PLAIN": "1"}     # not among the variables Ray shows
        package = Path(sent["py_modules"][1])
        assert sent["py_modules"][0] == "/somewhere/orchestrator"
        assert package.name == contract.SECRETS_MODULE
        init = package / "__init__.py"
        assert stat.S_IMODE(init.stat().st_mode) == 0o600
        assert stat.S_IMODE(package.stat().st_mode) == 0o700
        assert stat.S_IMODE(package.parent.stat().st_mode) == 0o700
        spec = importlib.util.spec_from_file_location(contract.SECRETS_MODULE, init)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        expected = {"API_KEY": environ["CI_KEY"]}   # OTHER is not shipped
        values = module.VALUES
        assert values == expected
        assert len(module.NONCE) == 32   # the package's content digest reveals nothing
    assert not package.parent.exists()
    assert runtime_env == {"py_modules": ["/somewhere/orchestrator"], "env_vars": {"PLAIN": "1"}}
    with shipped(runtime_env, {}, environ) as sent:   # no secrets: the runtime_env as it was
        assert sent is runtime_env
