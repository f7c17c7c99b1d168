"""A plan for people (text, markdown for a pull-request comment) and for programs (JSON, schema
in schemas/plan.schema.json), and as a saved plan file (`plan --out`, `apply PLANFILE`).

    as_json(plan, git_commit) -> dict          format_version 1
    text(plan) / markdown(plan) -> str
    save(path, plan, git_commit, files) / load(path) -> dict
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from ..actions import Action
from ..errors import StateError
from ..providers.cost import money
from ..util.files import atomic_write
from .cost import ClusterCost, PlanCost, signed
from .planner import Change, Drift, ProjectPlan

FORMAT_VERSION = 1
PLAN_KIND = "orchestrate-plan"


def git_commit(folder: Path) -> str | None:
    """The commit checked out in `folder`'s repository, if it is one (and git is installed)."""
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def summary_line(plan: ProjectPlan) -> str:
    count = plan.summary()
    if not plan.actions:
        return f"No changes. {count['unchanged']} unchanged."
    return (f"Plan: {count['create']} to create, {count['update']} to update, "
            f"{count['delete']} to delete, {count['unchanged']} unchanged.")


def as_json(plan: ProjectPlan, commit: str | None) -> dict[str, Any]:
    return {"format_version": FORMAT_VERSION, "project": plan.project,
            "project_file": plan.project_file,
            "lineage": plan.lineage, "serial": plan.serial, "git_commit": commit,
            "partial": plan.partial, "refreshed": plan.refreshed,
            "changes": [c.as_dict() for c in plan.changes],
            "drift": [d.as_dict() for d in plan.drift], "summary": plan.summary(),
            **({"cost": plan.cost.as_dict()} if plan.cost is not None else {})}


def _range(price: dict[str, float | None] | None) -> str:
    """`$1.20/h-$4.80/h` (workers at min, at max), `none` when there is no cluster."""
    if price is None:
        return "none"
    low, high = price.get("at_min"), price.get("at_max")
    return money(low) if low == high else f"{money(low)} to {money(high)}"


def price_line(change: Change) -> str | None:
    """A cluster change's price: before -> after, workers at min_workers to max_workers."""
    if change.price is None:
        return None
    price = change.price
    before, after = price.get("before"), price.get("after")
    if before is None or before == after:
        return f"price: {_range(after)} (workers at min to max)"
    change_at_max = price.get("change_at_max")
    return (f"price: {_range(before)} -> {_range(after)} (workers at min to max"
            + (f"; {signed(change_at_max)} at max)" if change_at_max is not None else ")"))


def estimate_line(found: dict[str, Any]) -> str:
    """`estimated cost: at most $4.41 (cluster/gpu at max_workers for 1.0 h, its time_budget_s)`"""
    at_most = found.get("at_most")
    amount = "unknown" if at_most is None else f"at most ${at_most:,.2f}"
    return (f"estimated cost: {amount} ({found.get('cluster')} at max_workers for "
            f"{found.get('hours', 0):g} h, its {found.get('field')})")


def cost_lines(cost: PlanCost | None) -> list[str]:
    """The project's total at max_workers, where prices come from, and the budget."""
    if cost is None or not cost.clusters:
        return []
    out = [f"Cost at max_workers: {money(cost.before)} -> {money(cost.after)}"
           + (f" ({signed(cost.change)})" if cost.change is not None else "")
           + (f"; {cost.source}" if cost.source else "")]
    out += [f"  warning: {c.address}: {w}" for c in cost.clusters for w in c.warnings]
    if cost.budget is not None:
        caps = [f"max_hourly {money(cost.budget.max_hourly)}"
                if cost.budget.max_hourly is not None else "",
                f"max_cluster_hourly {money(cost.budget.max_cluster_hourly)}"
                if cost.budget.max_cluster_hourly is not None else ""]
        caps_text = ", ".join(c for c in caps if c)
        if cost.over:
            out.append(f"Over budget ({caps_text}): apply needs --allow-over-budget")
            out += [f"  ! {why}" for why in cost.over]
        else:
            out.append(f"Within budget ({caps_text}).")
    return out


def _lines(change: Change) -> list[str]:
    lines = [f"{change.action.symbol:>3} {change.address}: {change.action} "
             f"({change.reason})" + (f"  [{change.file}]" if change.file else "")]
    lines += [f"      {field}" for field in change.fields]
    if change.resource_fields:
        lines.append("      in the RayCluster:")
        lines += [f"        {field}" for field in change.resource_fields]
    price = price_line(change)
    if price:
        lines.append(f"      {price}")
    if change.estimate:
        lines.append(f"      {estimate_line(change.estimate)}")
    if change.interrupts:
        lines.append(f"      interrupts running jobs: {', '.join(change.interrupts)}")
    if change.runs:
        lines.append("      its file is gone: it would run what the state says (data, not "
                     "checked against any file):")
        lines += [f"        {line}" for line in change.runs]
    return lines


def text(plan: ProjectPlan) -> str:
    out = [f"project {plan.project}"
           + (f" from {plan.project_file}" if plan.project_file else "")
           + f" (state serial {plan.serial}"
           + (", partial: only the files given" if plan.partial else "")
           + ("" if plan.refreshed else ", not refreshed") + ")"]
    if plan.drift:
        out += ["", "Drift (found live, not in the files):"]
        out += [f"  ~ {d.address}: {d.message}" for d in plan.drift]
    if plan.actions:
        out += ["", "Changes:"]
        for change in plan.actions:
            out += _lines(change)
    if plan.destructive:
        out += ["", f"{len(plan.destructive)} destructive change(s): apply needs "
                    f"--allow-destructive"]
    costs = cost_lines(plan.cost)
    if costs:
        out += ["", *costs]
    out += ["", summary_line(plan)]
    return "\n".join(out)


def markdown(plan: ProjectPlan, commit: str | None) -> str:
    out = [f"### orchestrate plan: `{plan.project}`", "",
           f"**{summary_line(plan)}**"
           + (f" (commit `{commit[:12]}`)" if commit else "")
           + (" Partial plan: only the files given." if plan.partial else ""), ""]
    if plan.actions:
        out += ["| | address | action | reason | interrupts |", "|---|---|---|---|---|"]
        for c in plan.actions:
            warn = ":warning:" if c.destructive else ""
            out.append(f"| {warn} | `{c.address}` | **{c.action}** | {_cell(c.reason)} | "
                       f"{', '.join(f'`{j}`' for j in c.interrupts)} |")
        detailed = [c for c in plan.actions if c.fields]
        if detailed:
            out += ["", "<details><summary>Changed fields</summary>", "", "```diff"]
            for c in detailed:
                out.append(f"# {c.address}")
                out += [f.replace("~ ", "! ", 1) for f in c.fields]
                if c.resource_fields:
                    out.append(f"# {c.address}: in the RayCluster")
                    out += [f.replace("~ ", "! ", 1) for f in c.resource_fields]
            out += ["```", "</details>"]
        for c in plan.actions:
            if c.runs:
                out += ["", f"`{c.address}`: its file is gone; tearing it down runs what the "
                            f"state says:", ""]
                out += [f"- {_cell(line).replace('`', chr(39))}" for line in c.runs]
    if plan.drift:
        out += ["", "**Drift** (found live, not in the files):", ""]
        out += [f"- `{d.address}`: {_cell(d.message)}" for d in plan.drift]
    if plan.destructive:
        out += ["", f":warning: {len(plan.destructive)} destructive change(s): apply needs "
                    f"`--allow-destructive`."]
    out += _cost_markdown(plan.cost)
    estimated = [c for c in plan.actions if c.estimate]
    if estimated:
        out += ["", "**Estimated cost of runs** (their time limit, the cluster at max_workers):",
                ""]
        out += [f"- `{c.address}`: {_cell(estimate_line(c.estimate or {}))}" for c in estimated]
    return "\n".join(out) + "\n"


def _cost_markdown(cost: PlanCost | None) -> list[str]:
    if cost is None or not cost.clusters:
        return []
    out = ["", "**Cost** (list prices per hour; workers at min_workers to max_workers):", "",
           "| cluster | before | after | change at max |", "|---|---|---|---|"]

    def row(item: ClusterCost) -> str:
        price = item.as_dict()
        return (f"| `{item.address}` | {_range(price['before'])} | {_range(price['after'])} | "
                f"{signed(item.change)} |")

    out += [row(item) for item in cost.clusters]
    out.append(f"| **total at max_workers** | **{money(cost.before)}** | "
               f"**{money(cost.after)}** | **{signed(cost.change)}** |")
    if cost.source:
        out += ["", f"Prices: {_cell(cost.source)}."]
    warnings = [f"- `{c.address}`: {_cell(w)}" for c in cost.clusters for w in c.warnings]
    if warnings:
        out += ["", ":warning: Unknown prices:", "", *warnings]
    if cost.over:
        out += ["", ":no_entry: **Over budget**: apply needs `--allow-over-budget`.", ""]
        out += [f"- {_cell(why)}" for why in cost.over]
    elif cost.budget is not None:
        out += ["", "Within budget."]
    return out


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def save(path: Path, plan: ProjectPlan, commit: str | None, files: list[str]) -> None:
    document = {"kind": PLAN_KIND, "created_at": time.time(), "files": files,
                **as_json(plan, commit)}
    atomic_write(path, json.dumps(document, indent=2, sort_keys=True) + "\n", mode=0o600)


def load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise StateError(f"no plan file {path}") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise StateError(f"{path} is not a plan file ({type(exc).__name__})") from None
    if not isinstance(document, dict) or document.get("kind") != PLAN_KIND:
        raise StateError(f"{path} is not a plan saved by `orchestrate plan --out`")
    if document.get("format_version") != FORMAT_VERSION:
        raise StateError(f"{path} is a plan of format {document.get('format_version')}; this "
                         f"orchestrate reads format {FORMAT_VERSION}",
                         hint="plan again with this version")
    problem = _plan_problem(document)
    if problem:
        raise StateError(f"{path} is a damaged plan file: {problem}",
                         hint="plan again (`orchestrate plan --out FILE`)")
    return document


def _plan_problem(document: dict[str, Any]) -> str | None:
    import jsonschema

    from ..language.schema import load_schema

    files = document.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return "'files' is not a list of file names"
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(load_schema("plan")).iter_errors(document))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or 'the document'}: {error.message[:200]}"


def from_json(document: dict[str, Any]) -> ProjectPlan:
    def change(c: dict[str, Any]) -> Change:
        values: dict[str, Any] = {k: tuple(v) if k in ("fields", "resource_fields", "interrupts",
                                                        "runs") else v
                                  for k, v in c.items()}
        values["action"] = Action(values["action"])
        return Change(**values)

    changes = tuple(change(c) for c in document["changes"])
    cost = None
    if document.get("cost") is not None:
        cost = PlanCost.from_dict(document["cost"])
    return ProjectPlan(document["project"], document["lineage"], document["serial"],
                       document["partial"], document["refreshed"], changes,
                       tuple(Drift(**d) for d in document["drift"]),
                       str(document.get("project_file") or ""), cost)
