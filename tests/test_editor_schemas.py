"""Editors understand the files: every example names its schema on its first line (the YAML
language server's modeline), is valid against it as written, and `orchestrate schema` gives the
same schemas and the editor settings that map the usual file names to them."""
from __future__ import annotations

import fnmatch
import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.cli import main
from orchestrator.commands.schema import KINDS
from orchestrator.language.kinds import is_cluster_document, is_experiment_document, is_service_document

REPO = Path(__file__).resolve().parents[1]
MODELINE = "# yaml-language-server: $schema="
EXAMPLE_FOLDERS = ("cluster_configs", "experiments", "services", "examples/gitops")


def examples() -> list[Path]:
    """Every YAML file of ours in the example folders (CI pipeline files are not ours)."""
    listed = subprocess.run(["git", "ls-files", "--", *EXAMPLE_FOLDERS], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    found = [REPO / name for name in listed if name.endswith((".yaml", ".yml"))
             and "/.github/" not in name and not name.endswith(".gitlab-ci.yml")]
    assert len(found) >= 21, found   # 6 clusters, 8 experiments, 2 services, the gitops example
    return found


def kind_of(path: Path, data: dict) -> str:
    """The kind orchestrate reads the file as (what `validate` says in its `ok` line)."""
    if path.name == "orchestrate.yaml":
        return "project"
    if is_cluster_document(data):
        return "cluster"
    if is_service_document(data):
        return "service"
    assert is_experiment_document(data), path
    return "experiment"


@pytest.mark.parametrize("path", examples(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_names_its_schema_and_is_valid_against_it(path):
    text = path.read_text()
    first = text.splitlines()[0]
    assert first.startswith(MODELINE), f"{path.name} does not start with {MODELINE}..."
    named = (path.parent / first[len(MODELINE):].strip()).resolve()
    assert named.is_file(), f"{path.name} names {named}, which does not exist"
    data = yaml.safe_load(text)
    assert named.name == f"{kind_of(path, data)}.schema.json"
    schema = json.loads(named.read_text())
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.validators.validator_for(schema)(schema).iter_errors(data)]
    assert errors == []


def test_schema_prints_the_packaged_schema_of_each_kind(capsys):
    for kind in KINDS:
        assert main(["schema", kind]) == 0
        out = capsys.readouterr().out
        assert out == (REPO / "schemas" / f"{kind}.schema.json").read_text()
        assert json.loads(out)["$id"].endswith(f"/{kind}.schema.json")


def test_schema_write_gives_settings_that_map_every_example_to_its_schema(tmp_path, capsys):
    folder = tmp_path / ".schemas"
    assert main(["schema", "--write", str(folder), "--format", "json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert sorted(Path(p).name for p in said["schemas"]) == sorted(f"{k}.schema.json" for k in KINDS)
    for kind in KINDS:
        assert (folder / f"{kind}.schema.json").read_text() == \
            (REPO / "schemas" / f"{kind}.schema.json").read_text()
    mapping = said["yaml.schemas"]
    for path in examples():
        relative = "/" + str(path.relative_to(REPO))
        matched = [Path(schema).name for schema, globs in mapping.items()
                   if any(fnmatch.fnmatch(relative, glob) for glob in globs)]
        modeline = path.read_text().splitlines()[0]
        assert matched == [Path(modeline).name], relative   # the settings agree with the modeline
    # again: the files are replaced, the same settings printed
    assert main(["schema", "--write", str(folder), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == said


def test_schema_without_a_kind_or_onto_a_file_is_refused(tmp_path, capsys):
    assert main(["schema"]) == 1
    assert "give a KIND" in capsys.readouterr().err
    taken = tmp_path / "file"
    taken.write_text("mine")
    assert main(["schema", "--write", str(taken)]) == 1
    assert "is not a folder" in capsys.readouterr().err
    assert taken.read_text() == "mine"


def test_hover_texts_say_what_the_fields_do_here():
    """Ray's own descriptions of these fields are wrong (max_workers: "no larger than the sum of
    min_workers", Ray's check is the other way round) or name another cloud (head_ip: "gcp
    project id"); the editor shows the corrected ones."""
    props = json.loads((REPO / "schemas" / "cluster.schema.json").read_text())["properties"]
    provider = props["provider"]["properties"]
    assert "no smaller than the sum of the node types' min_workers" in props["max_workers"]["description"]
    assert provider["head_ip"]["description"].startswith("provider type local only: the on-prem head")
    assert provider["worker_ips"]["description"].startswith("provider type local only: the on-prem worker")
    assert "gcp" not in provider["head_ip"]["description"]
    node_type = props["available_node_types"]["patternProperties"][".*"]["properties"]
    assert all(node_type[key].get("description") for key in ("min_workers", "max_workers"))
