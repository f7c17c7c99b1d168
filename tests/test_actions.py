"""The one vocabulary of changes: every action has its word, past tense, mark and count, and
the plan schema allows exactly the words the planners use."""
from __future__ import annotations

import json
from pathlib import Path

from orchestrator.actions import GROUPS, Action

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "plan.schema.json"


def test_every_action_has_every_word():
    for action in Action:
        assert action.done and action.symbol and action.group in GROUPS
        assert str(action) == f"{action}" == action.value


def _enums_of(node: object, key: str) -> list[list[str]]:
    if isinstance(node, dict):
        found = [node[key]["enum"]] if isinstance(node.get(key), dict) and \
            "enum" in node[key] else []
        return found + [e for value in node.values() for e in _enums_of(value, key)]
    if isinstance(node, list):
        return [e for value in node for e in _enums_of(value, key)]
    return []


def test_the_plan_schema_allows_exactly_the_actions():
    [enum] = _enums_of(json.loads(SCHEMA.read_text()), "action")
    assert sorted(enum) == sorted(a.value for a in Action)


def test_what_up_reports_and_plans_count_did_not_change():
    assert [a.done for a in (Action.CREATE, Action.NOOP, Action.UPDATE, Action.RESTART,
                             Action.REPLACE)] == ["created", "unchanged", "updated", "restarted",
                                                  "replaced"]
    assert Action.DESTROY.value == "delete" and Action.DESTROY.destructive
