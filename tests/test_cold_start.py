"""`validate` runs in pre-commit hooks and on every pull request, so it starts as fast as
importing yaml and jsonschema allows (benchmarks/cold_start.py measures it): validating a cluster
file imports its own provider's module and the cluster language, and nothing for experiments,
services, projects, other clouds, trainers or models. A module added to this list is a cost every
hook pays; import it inside the function that needs it instead."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# orchestrate's modules, all of them (the standard library's depend on the Python: only those
# known to cost are listed, in SLOW).
CLUSTER_FILE_IMPORTS = {
    "orchestrator", "orchestrator.cli", "orchestrator.commands", "orchestrator.commands.validate",
    "orchestrator.errors", "orchestrator.output", "orchestrator.yamlload", "orchestrator.util",
    "orchestrator.util.progress", "orchestrator.util.text", "orchestrator.cluster_settings",
    "orchestrator.language", "orchestrator.language.kinds", "orchestrator.language.paths",
    "orchestrator.language.schema", "orchestrator.language.shorthand",
    "orchestrator.language.cluster", "orchestrator.providers", "orchestrator.providers.base",
    "orchestrator.providers.cloud", "orchestrator.providers.prices",
}


SLOW = {"hashlib", "csv", "ssl", "asyncio", "http.client", "urllib.request", "email", "sqlite3",
        "multiprocessing", "concurrent.futures", "tempfile", "shutil", "zipfile", "tarfile"}
HEAVY = {"ray", "torch", "numpy", "pandas", "pyarrow", "boto3", "botocore", "google", "azure",
         "kubernetes", "xgboost", "lightgbm", "mlflow", "matplotlib", "filelock", "psutil",
         "cryptography", "requests", "urllib3", "tensorflow", "keras"}


def imported(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\n"
                           "print(json.dumps(sorted(sys.modules)))"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def validated(path: str) -> set[str]:
    return imported("from orchestrator.cli import main\n"
                    f"assert main(['validate', {path!r}]) == 0") - imported("import yaml, jsonschema")


@pytest.mark.parametrize("path, provider", [
    ("cluster_configs/aws-gpu.yaml", "aws"),
    ("cluster_configs/local.yaml", "local"),
    ("cluster_configs/gcp.yaml", "gcp"),
])
def test_validating_a_cluster_file_imports_its_provider_and_the_cluster_language_alone(path, provider):
    found = validated(path)
    ours = {name for name in found if name.split(".")[0] == "orchestrator"}
    wanted = CLUSTER_FILE_IMPORTS | {f"orchestrator.providers.{provider}"}
    if provider == "local":   # an on-prem file has no cloud: no prices, no cloud helpers
        wanted -= {"orchestrator.providers.cloud", "orchestrator.providers.prices"}
    assert ours - wanted == set(), f"validate of {path} now imports more: {sorted(ours - wanted)}"
    assert wanted - ours == set(), f"no longer imported (update the list): {sorted(wanted - ours)}"
    assert found & SLOW == set() and {n for n in found if n.split(".")[0] in HEAVY} == set()


def test_validating_an_experiment_pays_for_no_training_library():
    found = validated("experiments/quickstart.yaml")
    assert {name for name in found if name.split(".")[0] in HEAVY} == set()
    assert "orchestrator.language.experiment" in found
