"""The experiment's runtime_env end to end on the embedded local Ray: a package the base
environment lacks (a wheel built here, no network) installed by `pip:`, a plain variable and a
secret taken from the submitting environment reaching the user's loop, `excludes` keeping a large
file out of the upload; the secret's value found nowhere it could leak (render, the run's printed
output, the job's log, `jobs --format json`, Ray's job info, the state folder, Ray's own folder,
logs and unpacked packages included).
Without the `pip:` line the same loop fails naming the missing module."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from tests.helpers import jobs_client

pytestmark = [pytest.mark.ray]

LOOP = '''\
import hashlib
import os

import tinypkg   # at the top: the job's driver imports this module too


def train_loop_per_worker(config):
    from ray import train

    here = os.path.dirname(os.path.abspath(__file__))   # the working_dir as unpacked by Ray
    shipped = sum(os.path.getsize(os.path.join(root, name))
                  for root, _, names in os.walk(here) for name in names)
    secret = hashlib.sha256(os.environ.get("API_KEY", "").encode()).hexdigest()
    for epoch in range(2):
        train.report({"epoch": epoch, "value": tinypkg.VALUE,
                      "secret_ok": int(secret == config["secret_sha256"]),
                      "mode_ok": int(os.environ.get("MODE") == "fast"),
                      "shipped_bytes": shipped,
                      "big_shipped": int(os.path.exists(os.path.join(here, "data", "big.bin")))})
'''
BIG = 8 * 1024 * 1024


def build_wheel(folder: Path, name: str = "tinypkg", version: str = "0.1") -> Path:
    """A pure-Python wheel, written by hand (pip wheel would fetch setuptools)."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: orchestrate-tests\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def project(root: Path, secret: str) -> tuple[Path, Path]:
    """The loop's folder (with the wheel and a large data file) and two experiments: with
    `pip:` and without."""
    loop = root / "loop"
    loop.mkdir(parents=True)
    (loop / "train.py").write_text(LOOP)
    build_wheel(loop / "wheels")
    (loop / "data").mkdir()
    (loop / "data" / "big.bin").write_bytes(os.urandom(BIG))
    base = {"trainer": "torch", "working_dir": "loop", "train_loop": "train:train_loop_per_worker",
            "train_loop_config": {"secret_sha256": hashlib.sha256(secret.encode()).hexdigest()},
            "run_config": {"storage_path": str(root / "results")}}
    env = {"env_vars": {"MODE": "fast", "API_KEY": {"from_env": "ORCHESTRATE_TEST_API_KEY"}},
           "excludes": ["data/"], "config": {"setup_timeout_seconds": 600}}
    with_pip = root / "with-pip.yaml"
    with_pip.write_text(yaml.safe_dump({"name": "with-pip", **base, "runtime_env": {
        "pip": ["loop/wheels/tinypkg-0.1-py3-none-any.whl"], **env}}, sort_keys=False))
    without = root / "without-pip.yaml"
    without.write_text(yaml.safe_dump({"name": "without-pip", **base, "runtime_env": env},
                                      sort_keys=False))
    return with_pip, without


def files_holding(root: Path, needle: bytes) -> list[str]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            try:
                if needle in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue
    return found


def test_packages_variables_secrets_and_excludes_reach_the_job(local_ray, tmp_path, monkeypatch,
                                                                capsys):
    secret = f"s3cret-{secrets.token_hex(12)}"
    monkeypatch.setenv("ORCHESTRATE_TEST_API_KEY", secret)
    with_pip, without = project(tmp_path, secret)

    assert main(["render", str(with_pip)]) == 0
    rendered = capsys.readouterr().out
    assert "API_KEY: <$ORCHESTRATE_TEST_API_KEY at submission" in rendered

    temporary = set(Path(tempfile.gettempdir()).glob("orchestrate-secrets-*"))
    assert main(["run", str(with_pip), "-v", "--format", "json"]) == 0   # -v: all of the log
    out, err = capsys.readouterr()
    # the package that carried the secret was removed here once submitted
    assert set(Path(tempfile.gettempdir()).glob("orchestrate-secrets-*")) == temporary
    summary = json.loads(out)
    metrics = summary["metrics"]
    assert (metrics["value"], metrics["secret_ok"], metrics["mode_ok"]) == (42, 1, 1)
    # excludes: the 8 MiB file is neither reported as shipped nor on the node
    assert re.search(r"shipping .*/loop as the job's working_dir: 2 files, \d\.\d KiB", err), err
    assert metrics["big_shipped"] == 0 and 0 < metrics["shipped_bytes"] < 10_000

    assert main(["jobs", "--format", "json"]) == 0
    listed = capsys.readouterr().out
    [job] = [row for row in json.loads(listed) if row["experiment"] == "with-pip"]
    assert main(["logs", job["job_id"]]) == 0
    log = capsys.readouterr().out
    assert "tinypkg" in log or "ORCHESTRATE_EPOCH" in log   # the log was read
    info = jobs_client(local_ray).info(job["job_id"])
    shown = info.runtime_env["env_vars"]
    assert (shown["MODE"], shown["ORCHESTRATE_SECRET_NAMES"]) == ("fast", "API_KEY")   # names only
    assert "API_KEY" not in shown

    needle = secret.encode()
    for where, text in {"render": rendered, "run's output": out + err, "jobs": listed,
                        "logs": log, "Ray's job info": json.dumps(info.runtime_env)}.items():
        assert secret not in text, where
    assert files_holding(Path(os.environ["ORCHESTRATE_HOME"]), needle) == []
    assert files_holding(tmp_path / "results", needle) == []
    # Ray's folder: its logs (the runtime-env agent logs each job's runtime_env), and
    # runtime_resources, where it unpacked the secrets' package and the job's driver removed it
    assert files_holding(Path(local_ray.temp_dir), needle) == []

    # The same loop without `pip:`: the job fails, naming the module and where to declare it.
    assert main(["run", str(without), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"^ERROR job orchestrate-without-pip-\w+ failed: ModuleNotFoundError: No "
                     r"module named 'tinypkg'", err, re.MULTILINE), err
    assert "TIP   a package the job needs goes under runtime_env.pip in the experiment file" in err
