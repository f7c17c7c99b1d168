"""orchestrate's own keys in a cluster file (autostop, archive, host_price_per_hour): checked by
the schema, moved under `metadata.orchestrate`, errors naming file, line and field."""
from __future__ import annotations

import textwrap

import pytest

from orchestrator import cluster_settings
from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.language.cluster import load_cluster

LOCAL = """\
cluster_name: c
provider: {type: local, head_ip: 10.0.0.1, worker_ips: [10.0.0.2]}
auth: {ssh_user: root}
"""
AWS = """\
cluster_name: c
provider: {type: aws, region: us-west-2}
"""


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_keys_move_under_metadata_and_keep_their_lines(tmp_path):
    path = write(tmp_path, LOCAL + "autostop:\n  idle_minutes: 5\n  ignore_ssh_sessions: true\n"
                 "archive: file:///srv/logs\nhost_price_per_hour: 0.4\n")
    spec = load_cluster(path, here=False)
    assert "autostop" not in spec.document and "archive" not in spec.document
    assert cluster_settings.autostop(spec.document) == {"idle_minutes": 5,
                                                        "ignore_ssh_sessions": True}
    assert cluster_settings.archive(spec.document) == "file:///srv/logs"
    assert cluster_settings.host_price(spec.document) == 0.4
    assert spec.line_of(("metadata", "orchestrate", "autostop", "idle_minutes")) == 5
    assert spec.line_of(("metadata", "orchestrate", "host_price_per_hour")) == 8


def test_a_file_without_them_has_no_metadata(tmp_path):
    assert "metadata" not in load_cluster(write(tmp_path, LOCAL), here=False).document


@pytest.mark.parametrize("text, line, field, words", [
    (LOCAL + "autostop: {ignore_ssh_sessions: true}\n", 4, "autostop",
     "idle_minutes or max_uptime_minutes"),
    (LOCAL + "autostop:\n  idle_minutes: 0\n", 5, "autostop.idle_minutes", "must be > 0"),
    (LOCAL + "autostop:\n  max_uptime_minutes: 5\n  idle: 3\n", 6, "autostop.idle",
     "unknown key 'idle'"),
    (LOCAL + "autostop: {idle_minutes: 1, ignore_ssh_sessions: 1}\n", 4,
     "autostop.ignore_ssh_sessions", "true or false"),
    (LOCAL + "archive: /srv/logs\n", 4, "archive", "s3://bucket/prefix or file:///"),
    (LOCAL + "host_price_per_hour: -1\n", 4, "host_price_per_hour", ">= 0"),
    (AWS + "host_price_per_hour: 1.5\n", 3, "host_price_per_hour", "on-prem"),
    (LOCAL + "metadata:\n  orchestrate: {autostop: {idle_minutes: 1}}\n", 5,
     "metadata.orchestrate", "orchestrate's own"),
    (LOCAL + "docker: {image: rayproject/ray:2.60.0, container_name: ray}\n"
     "autostop: {idle_minutes: 5}\n", 5, "autostop", "does not work with docker"),
])
def test_mistakes_name_line_and_field(tmp_path, capsys, text, line, field, words):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as raised:
        load_cluster(path, here=False)
    found = [p for p in raised.value.problems if p.field == field]
    assert found and found[0].line == line and words in found[0].message, raised.value.problems
    assert main(["validate", str(path)]) != 0
    err = capsys.readouterr()
    assert f"c.yaml:{line}: {field}" in err.out + err.err and "Traceback" not in err.err


def test_user_metadata_is_kept_beside_orchestrates(tmp_path):
    path = write(tmp_path, LOCAL + "metadata: {team: vision}\nautostop: {max_uptime_minutes: 9}\n")
    document = load_cluster(path, here=False).document
    assert document["metadata"] == {"team": "vision",
                                     "orchestrate": {"autostop": {"max_uptime_minutes": 9}}}


def test_profiling_is_exported_to_the_heads_ray_start_only(tmp_path):
    """`profiling: true` (issue 33): the head's `ray start` runs with
    RAY_DASHBOARD_ENABLE_PROFILING=1, the workers' do not; without it, nothing changes."""
    from orchestrator.render.cluster import render_cluster

    on = load_cluster(write(tmp_path, LOCAL + "profiling: true\n"), here=False)
    assert cluster_settings.profiling(on.document) and "profiling" not in on.document
    assert on.line_of(("metadata", "orchestrate", "profiling")) == 4
    config = render_cluster(on, token_file="/t").config
    head = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    assert head and all("export RAY_DASHBOARD_ENABLE_PROFILING=1; " in c for c in head)
    assert not any("PROFILING" in c for c in config["worker_start_ray_commands"])

    off = load_cluster(write(tmp_path, LOCAL + "profiling: false\n"), here=False)
    assert not cluster_settings.profiling(off.document)
    plain = render_cluster(load_cluster(write(tmp_path, LOCAL), here=False), token_file="/t")
    for rendered in (render_cluster(off, token_file="/t").config, plain.config):
        assert not any("PROFILING" in c for c in rendered["head_start_ray_commands"])


def test_profiling_must_be_true_or_false(tmp_path):
    path = write(tmp_path, LOCAL + "profiling: yes please\n")
    with pytest.raises(SpecError) as raised:
        load_cluster(path, here=False)
    [problem] = [p for p in raised.value.problems if p.field == "profiling"]
    assert problem.line == 4 and "true or false" in problem.message


def test_an_experiment_asks_for_profiling_on_the_embedded_ray_not_on_a_cluster(tmp_path):
    """`profiling: true` in an experiment starts the embedded Ray with it; with `cluster:`, the
    cluster file must say it (its Ray restarts for it), else the experiment names that file."""
    from orchestrator.language.experiment import load_experiment

    experiment = ("name: e\ntrainer: torch\ntrain_loop: loop:train\nprofiling: true\n"
                  "run_config: {storage_path: s3://b/runs}\n")   # c.yaml has two nodes
    (tmp_path / "loop.py").write_text("def train(config):\n    pass\n")
    (tmp_path / "e.yaml").write_text(experiment)
    assert load_experiment(tmp_path / "e.yaml", here=False).profiling

    write(tmp_path, LOCAL)
    (tmp_path / "e.yaml").write_text(experiment + "cluster: c.yaml\n")
    with pytest.raises(SpecError) as raised:
        load_experiment(tmp_path / "e.yaml", here=False)
    [problem] = [p for p in raised.value.problems if p.field == "profiling"]
    assert problem.line == 4 and "its cluster file's setting" in problem.message
    assert f"add `profiling: true` to {tmp_path / 'c.yaml'}" in problem.hint

    write(tmp_path, LOCAL + "profiling: true\n")
    spec = load_experiment(tmp_path / "e.yaml", here=False)
    assert spec.cluster is not None and cluster_settings.profiling(spec.cluster.document)
