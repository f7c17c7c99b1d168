"""orchestrate validate PATH...: check cluster and experiment files, report every error.

Nothing is launched from here, so the checks that depend on this machine (a cluster's local
file_mounts sources and SSH key files) are warnings: a CI runner validating a repository has
neither (`up` and `check` keep them errors)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import Problem, SpecError
from ..output import add_format_argument, emit_json

SUFFIXES = (".yaml", ".yml")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="YAML files or folders")
    add_format_argument(parser)


def collect_files(paths: list[str]) -> tuple[list[Path], list[Problem]]:
    files: list[Path] = []
    problems: list[Problem] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                problems.append(Problem(text, "the folder holds no .yaml or .yml file"))
            files.extend(found)
        elif os.path.lexists(path):  # the loader says what is wrong with a link, pipe or device
            files.append(path)
        else:
            problems.append(Problem(text, "no such file or folder"))
    return files, problems


def _resolved(file: str) -> str:
    try:
        return str(Path(file).resolve())
    except (OSError, RuntimeError):
        return file


def validate_file(path: Path) -> dict[str, Any]:
    from ..language import load_any
    from ..language.kinds import PROJECT_FILE

    try:
        if path.name == PROJECT_FILE:
            from ..language.project import load_project
            load_project(path)
            return {"file": str(path), "kind": "project", "valid": True, "errors": []}
        spec = load_any(path, here=False)
    except SpecError as exc:
        return {"file": str(path), "kind": None, "valid": False,
                "errors": [p.as_dict() for p in exc.problems]}
    from ..language.cluster import ClusterSpec

    if isinstance(spec, ClusterSpec):
        kind, warnings = "cluster", list(spec.warnings)
    else:   # an experiment's or service's module: the file was one (and imported it)
        from ..language.experiment import ExperimentSpec

        kind = "experiment" if isinstance(spec, ExperimentSpec) else "service"
        warnings = list(spec.cluster.warnings if spec.cluster else ())
    return {"file": str(path), "kind": kind, "valid": True, "errors": [p.as_dict() for p in warnings]}


def run(args: argparse.Namespace) -> int:
    files, missing = collect_files(args.paths)
    results = [validate_file(path) for path in files]
    results += [{"file": p.file, "kind": None, "valid": False, "errors": [p.as_dict()]} for p in missing]
    valid = all(r["valid"] for r in results)
    for result in results:  # warnings travel with errors, each marked by its severity
        result["warnings"] = [e for e in result["errors"] if e["severity"] == "warning"]
        result["errors"] = [e for e in result["errors"] if e["severity"] != "warning"]
    if args.format == "json":
        emit_json({"valid": valid, "files": results})
    else:
        seen: set[tuple[Any, ...]] = set()   # a cluster's problem met again through an experiment

        def once(problem: dict[str, Any]) -> bool:
            key = (_resolved(problem["file"]), problem.get("line"), problem.get("field"),
                   problem["message"])
            fresh = key not in seen
            seen.add(key)
            return fresh

        errors = 0
        for result in results:
            if result["valid"]:
                print(f"ok      {result['file']} ({result['kind']})")
            for error in filter(once, result["errors"]):
                errors += 1
                print(f"ERROR   {Problem(**error).format()}", file=sys.stderr)
            for warning in filter(once, result["warnings"]):
                print(f"WARNING {Problem(**warning).format()}", file=sys.stderr)
        bad = [r for r in results if not r["valid"]]
        summary = f"{len(results)} file(s) checked"
        if bad:
            summary += f", {len(bad)} invalid with {errors} error(s)"
        print(summary, file=sys.stderr)
    return 0 if valid else 1
