"""`orchestrate check`, the provider registry, missing SDKs, and that importing providers stays
light."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from orchestrator import cli
from orchestrator.errors import MissingDependency
from orchestrator.providers import OK, PROVIDERS, WARN, check_cluster, check_credentials, ensure_ready
from orchestrator.providers.base import Provider

from .test_aws import aws_yaml


def test_registry_is_keyed_by_name_and_every_module_satisfies_the_protocol():
    """mypy checks the types (the registries are typed against the protocols under TYPE_CHECKING);
    this checks it at run time, each module imported through the registry."""
    members = {name: value for name, value in vars(Provider).items() if not name.startswith("_")}
    assert {"NAME", "EXTRA", "REQUIRED", "check", "credentials", "after_down"} <= set(members)
    for name, module in PROVIDERS.items():
        assert name == module.NAME
        for member, declared in members.items():
            assert hasattr(module, member), (name, member)
            wanted_callable = not isinstance(declared, property)
            assert callable(getattr(module, member)) is wanted_callable, (name, member)


def test_importing_preflight_and_the_command_loads_no_sdk():
    code = ("import sys, orchestrator.providers, orchestrator.commands.check; "
            "print([m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'google', 'azure')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_check_a_good_file_prints_a_table_and_exits_0(aws, cluster, capsys):
    spec = cluster(aws_yaml())
    assert cli.main(["check", str(spec.path)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == f"{spec.path} (preflight-aws, aws)"
    assert lines[1].split() == ["CHECK", "RESULT", "DETAIL", "WHERE", "HINT"]
    assert any(line.startswith("region") and " ok " in line and "provider.region (line 5)" in line
               for line in lines)
    assert "0 failed" in err and "ready to launch" in err


def test_check_a_bad_file_exits_1_naming_field_and_line(aws, cluster, capsys):
    spec = cluster(aws_yaml(zones="us-west-2d"))
    assert cli.main(["check", str(spec.path)]) == 1
    out, err = capsys.readouterr()
    row = [line for line in out.splitlines() if " fail " in line]
    assert len(row) == 1 and "g5.xlarge is not offered in zone us-west-2d" in row[0]
    assert "available_node_types.worker.node_config.InstanceType (line 17)" in row[0]
    assert "1 failed" in err


def test_check_json(aws, cluster, capsys):
    good, bad = cluster(aws_yaml(), "good.yaml"), cluster(aws_yaml(image="ami-12345678"), "bad.yaml")
    assert cli.main(["check", str(good.path), str(bad.path), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert [f["ok"] for f in report["files"]] == [True, False]
    failed = [c for c in report["files"][1]["checks"] if c["status"] == "fail"]
    assert failed == [{"name": "image", "status": "fail",
                       "field": "available_node_types.head.node_config.ImageId", "line": 13,
                       "detail": "AMI ami-12345678 does not exist in us-west-2 or is not readable",
                       "hint": failed[0]["hint"]}]


def test_check_without_files_reports_each_cloud(aws, capsys):
    assert cli.main(["check", "--format", "json"]) == 0
    clouds = {c["name"]: c for c in json.loads(capsys.readouterr().out)["clouds"]}
    assert clouds["aws credentials"]["status"] == OK and "123456789012" in clouds["aws credentials"]["detail"]
    assert clouds["gcp credentials"]["status"] == WARN and "gcloud auth" in clouds["gcp credentials"]["hint"]
    assert clouds["azure credentials"]["status"] == WARN and "az login" in clouds["azure credentials"]["hint"]
    # This machine has an ssh client (tests/prerequisites.py); without one on PATH it warns.
    assert (clouds["local ssh"]["status"], clouds["local ssh"]["detail"]) == \
        (OK, f"ssh client at {shutil.which('ssh')}")


def test_check_without_an_ssh_client_warns_for_local(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))   # an empty folder: no ssh anywhere on it
    from orchestrator.providers import local

    row = local.credentials()
    assert (row.name, row.status, row.detail, row.hint) == \
        ("local ssh", WARN, "no ssh client on PATH", "install openssh-client")


def test_missing_sdk_names_the_pip_extra(cluster, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 now raises ImportError
    spec = cluster(aws_yaml())
    with pytest.raises(MissingDependency) as raised:
        check_cluster(spec)
    assert raised.value.hint == 'pip install "orchestrate-ray[aws]"'
    assert cli.main(["check", str(spec.path)]) == 1
    assert 'TIP   pip install "orchestrate-ray[aws]"' in capsys.readouterr().err
    row = [r for r in check_credentials() if r.name == "aws credentials"][0]
    assert row.status == WARN and row.hint == 'pip install "orchestrate-ray[aws]"'


def test_ensure_ready_returns_the_results_when_nothing_fails(aws, cluster):
    results = ensure_ready(cluster(aws_yaml()))
    assert results and {r.status for r in results} <= {OK, WARN}
