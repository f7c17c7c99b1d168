"""Trainer knowledge lives in the trainer modules (`orchestrator/trainers/`, the client's, and
`orchestrator/workload/trainers/`, the job's); everywhere else code asks the registry. Read with
`ast`: a comparison (==, !=, in, not in, a `match` case) with a registered trainer's name outside
those modules fails. `data_loader: torch` names a data loader, not the trainer: a comparison
whose other side reads `data_loader` is not one of the trainer's."""
from __future__ import annotations

import ast
from pathlib import Path

from orchestrator import trainers
from orchestrator.workload import trainers as job_trainers

PACKAGE = Path(__file__).resolve().parents[1] / "orchestrator"
HOMES = (PACKAGE / "trainers", PACKAGE / "workload" / "trainers")
OTHER_FIELDS = {"data_loader"}   # fields whose values may spell a trainer's name


def _reads(node: ast.AST) -> set[str]:
    """The string keys and attribute names an expression reads (`x.get("k")`, `x["k"]`, `x.k`)."""
    found = set()
    for part in ast.walk(node):
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            found.add(part.value)
        elif isinstance(part, ast.Attribute):
            found.add(part.attr)
        elif isinstance(part, ast.Name):
            found.add(part.id)
    return found


def _named(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Constant) and n.value in names for n in ast.walk(node))


def comparisons(source: str, names: set[str]) -> list[int]:
    """The lines of `source` that compare something with one of `names`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [side for side in sides if _named(side, names)]
            others = [side for side in sides if not any(side is n for n in named)]
            if named and not any(_reads(side) & OTHER_FIELDS for side in others):
                lines.append(node.lineno)
        elif isinstance(node, ast.match_case) and _named(node.pattern, names):
            lines.append(node.pattern.lineno)
    return lines


def test_the_guard_can_fail():
    names = {"torch", "xgboost", "lightgbm", "tensorflow"}
    flagged = [
        'if config.get("trainer") == "xgboost": pass',
        'x = card["trainer"] != "torch"',
        'if spec.trainer == "tensorflow": pass',
        'x = spec.trainer in ("xgboost", "lightgbm")',
        'x = "lightgbm" == name',
        'match trainer:\n    case "torch": pass',
    ]
    for source in flagged:
        assert comparisons(source, names) == [source.count("\n") + 1], source
    allowed = [
        'x = config.get("data_loader") == "torch"',
        'x = job["config"].get("data_loader") != "torch"',
        'x = data_loader == "torch"',
        'x = config.get("trainer") == name',
        'x = get("xgboost")',
    ]
    for source in allowed:
        assert comparisons(source, names) == [], source


def test_no_trainer_name_is_compared_outside_the_trainer_modules():
    names = set(trainers.names())
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(home in path.parents for home in HOMES):
            continue
        found += [f"{path.relative_to(PACKAGE.parent)}:{line}"
                  for line in comparisons(path.read_text(), names)]
    assert not found, "trainer names compared outside the trainer modules: " + ", ".join(found)


def test_the_client_and_the_job_know_the_same_trainers():
    assert trainers.names() == job_trainers.names() == ["lightgbm", "tensorflow", "torch", "xgboost"]
    for name in trainers.names():
        assert trainers.get(name).NAME == job_trainers.get(name).NAME == name


def test_a_field_two_trainers_take_has_one_schema():
    properties = trainers.schema_properties()
    assert properties["params"]["description"].endswith("(trainer: lightgbm, xgboost)")
    assert properties["model"]["description"] == "trainer: tensorflow, torch"
    assert set(properties) == {f for name in trainers.names() for f in trainers.get(name).FIELDS}


def test_each_trainer_names_itself_and_what_people_write_for_it():
    """`validate` answers a trainer's ALIASES with its name and TITLE (`language.schema`); an
    alias is no trainer's name and leads to one trainer only."""
    from orchestrator.language.schema import enum_hint

    seen: dict[str, str] = {}
    for name in trainers.names():
        trainer = trainers.get(name)
        assert trainer.TITLE and trainer.ALIASES, name
        for alias in trainer.ALIASES:
            assert alias == alias.lower() and alias not in trainers.names(), alias
            assert seen.setdefault(alias, name) == name, f"{alias}: {seen[alias]} and {name}"
            assert enum_hint(("trainer",), alias.upper(), trainers.names()) == \
                f"did you mean '{name}'? {name} is {trainer.TITLE}"
    assert seen["keras"] == "tensorflow" and seen["pytorch"] == "torch"
