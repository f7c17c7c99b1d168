"""The docs: the field tables are what the schemas give, links lead somewhere, the README's two
commands are the ones the scripts and CI run, the quick start's set-up stays free of the tests'
system packages, and the repository's pre-commit hooks run the pinned tools."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"
QUICKSTART = "bash scripts/setup.sh && .venv/bin/orchestrate run experiments/quickstart.yaml"
TESTS = "bash scripts/test.sh"


def _script(name: str):  # scripts/ is not a package
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _schema_docs():
    return _script("schema_docs")


def test_the_command_reference_is_what_the_parser_gives() -> None:
    doc = ROOT / "docs" / "commands.md"
    text = doc.read_text()
    assert _script("command_docs").render(text) == text, (
        "docs/commands.md's command reference differs from the CLI's parser; run: "
        ".venv/bin/python scripts/command_docs.py")
    from orchestrator.cli import COMMANDS

    for verb in COMMANDS:
        assert f"### `{verb}`" in text, verb
    unexplained = [line for line in text.splitlines() if line.startswith("| `")
                   and line.endswith("|  |")]
    assert not unexplained, f"arguments without a help text: {unexplained}"


def test_field_tables_are_what_the_schemas_give() -> None:
    stale = [str(path.relative_to(ROOT)) for path in _schema_docs().stale()]
    assert not stale, (f"the field tables in {', '.join(stale)} differ from schemas/*.json; "
                       "run: .venv/bin/python scripts/schema_docs.py")


def test_every_schema_has_its_table_in_the_docs() -> None:
    text = "".join(path.read_text() for path in DOCS)
    for schema in sorted((ROOT / "schemas").glob("*.schema.json")):
        name = schema.name.removesuffix(".schema.json")
        assert f"<!-- fields:{name} begin -->" in text, f"no field table for {schema.name} in docs/"


def test_a_table_lists_every_field_of_its_schema() -> None:
    rows = _schema_docs().rows("experiment")
    fields = {row[0].strip("`") for row in rows}
    assert {"trainer", "scaling_config.num_workers", "datasets.<name>.path",
            "tune.tune_config.scheduler.type"} <= fields
    trainer = next(row for row in rows if row[0] == "`trainer`")
    assert "`torch`" in trainer[3] and trainer[4].startswith("**required**")


def _anchors(text: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("path", [README, ROOT / "CHANGELOG.md", *DOCS], ids=lambda p: p.name)
def test_relative_links_lead_to_a_file_and_heading(path: Path) -> None:
    text = path.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code, where brackets are not links
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{path.name}: link to {target}: no such file"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked.read_text()), f"{path.name}: link to {target}: no such heading"


def test_readme_gives_the_quick_start_and_the_test_command_that_ci_runs() -> None:
    readme = README.read_text()
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, flags=re.S)
    assert any(block.strip() == QUICKSTART for block in blocks), f"README: no block `{QUICKSTART}`"
    assert any(block.strip() == TESTS for block in blocks), f"README: no block `{TESTS}`"
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert ci[-1] == TESTS, ".ci/run must end by running the README's test command"
    assert "bash scripts/setup-dev.sh" in (ROOT / "scripts" / "test.sh").read_text()


def test_readme_stays_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= 200, f"README.md has {lines} lines: the reference goes in docs/, the README links to it"


def test_the_quick_starts_set_up_installs_no_system_packages() -> None:
    """What the README's first command runs: no apt, no root, nothing for the SSH or browser
    tests (scripts/setup-dev.sh has those)."""
    code = [line for line in (ROOT / "scripts" / "setup.sh").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    for word in ("apt", "sudo", "sshd", "ssh", "chromium", "[dev]", "mlflow"):
        assert not any(word in line for line in code), f"scripts/setup.sh mentions {word!r}"


def test_pre_commit_config_is_valid_and_runs_the_pinned_tools() -> None:
    config = ROOT / ".pre-commit-config.yaml"
    done = subprocess.run([sys.executable, "-m", "pre_commit", "validate-config", str(config)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    hooks = {hook["id"]: hook for repo in yaml.safe_load(config.read_text())["repos"]
             for hook in repo["hooks"]}
    pins = dict(re.findall(r'"(ruff|mypy)==([^"]+)"', (ROOT / "pyproject.toml").read_text()))
    for tool in ("ruff", "mypy"):
        assert hooks[tool]["entry"].startswith(f".venv/bin/{tool}"), hooks[tool]
        assert hooks[tool]["name"].startswith(f"{tool} {pins[tool]}"), \
            f"the {tool} hook's name says another version than pyproject's {tool}=={pins[tool]}"


def test_every_extra_and_the_distribution_name_are_where_install_is_described() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "orchestrate-ray"   # on PyPI, `orchestrate` is another project
    assert project["scripts"] == {"orchestrate": "orchestrator.cli:entry"}
    readme = README.read_text()
    places = {"README.md#install": readme[readme.index("## Install"):readme.index("## Security model")],
              "docs/commands.md#install": (ROOT / "docs" / "commands.md").read_text().split(
                  "## Every command")[0]}
    for place, text in places.items():
        assert "orchestrate-ray" in text, f"{place} does not name the distribution"
        for extra in project["optional-dependencies"]:
            assert f"`[{extra}]`" in text, f"{place} does not list the extra [{extra}]"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    texts = {path: path.read_text() for path in [
        README, *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.*"),
        *(ROOT / "orchestrator").rglob("*.py"), *(ROOT / "scripts").glob("*.*")] if path.is_file()}
    texts[ROOT / "CHANGELOG.md"] = changelog[:changelog.index("\n## [0.")]   # what is not released
    old = re.compile(r"""pip install (?:-\S+ )*["']?orchestrate(?:\[|\s|["']|$)""", re.M)
    for path, text in texts.items():
        wrong = old.findall(text)
        assert not wrong, f"{path.relative_to(ROOT)}: {wrong} installs the other project's distribution"


DESIGN = ROOT / "docs" / "design.md"
# a path in backticks, from the repository's root
REPO_PATH = re.compile(r"`((?:orchestrator|tests|scripts|benchmarks|schemas|docs)/[\w/.-]+)`")
# a row of the package layout: | `package/` | what its modules do |
PACKAGE_ROW = re.compile(r"^\| `(\w+)/` \| (.*)\|$")


def design_misreadings(text: str, package: Path) -> tuple[list[str], list[str]]:
    """(the modules the design names that do not exist, the modules of a package its row of
    the package layout leaves out)."""
    root = package.parent
    missing = [path for path in REPO_PATH.findall(text) if not (root / path).exists()]
    omitted = []
    for line in text.splitlines():
        row = PACKAGE_ROW.match(line)
        if not row:
            continue
        name, said = row.groups()
        folder = package / name
        if not folder.is_dir():
            missing.append(f"{name}/")
            continue
        for module in re.findall(r"`([\w/]+\.py)`", said):
            if not REPO_PATH.match(f"`{module}`") and not list(folder.rglob(Path(module).name)):
                missing.append(f"{name}/{module}")
        words = set(re.findall(r"`([\w/.]+)`", said)) | set(re.findall(r"[\w/]+\.py", said))
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder)
            if path.name == "__init__.py" or "__pycache__" in relative.parts:
                continue
            if not words & {str(relative), path.name, path.stem}:
                omitted.append(f"{name}/{relative}")
    return missing, omitted


def test_the_design_names_modules_that_exist_and_every_module_of_a_package() -> None:
    missing, omitted = design_misreadings(DESIGN.read_text(), ROOT / "orchestrator")
    assert missing == [], f"docs/design.md names what does not exist: {missing}"
    assert omitted == [], f"docs/design.md's package layout leaves out: {omitted}"


def test_the_design_check_can_fail(tmp_path: Path) -> None:
    package = tmp_path / "orchestrator"
    (package / "jobs").mkdir(parents=True)
    for module in ("client.py", "serve.py", "__init__.py"):
        (package / "jobs" / module).write_text("")
    text = ("| `jobs/` | `client.py` (the client), `gone.py` (no more) |\n"
            "See `orchestrator/render/kuberay.py`.\n")
    missing, omitted = design_misreadings(text, package)
    assert missing == ["orchestrator/render/kuberay.py", "jobs/gone.py"]
    assert omitted == ["jobs/serve.py"]
