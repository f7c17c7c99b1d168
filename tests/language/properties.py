"""The properties every generated document must have, shared by tests/language/test_generated.py
and benchmarks/fuzz.py. Each raises PropertyFailure (with what went wrong) when one does not hold.

    check_document(text, path)   loading and validating raise nothing but OrchestrateError, and
                                 every problem names its file, line and field
    check_deterministic(text)    `validate` of the same file twice says the same
    check_renders(spec)          a valid cluster renders to a config Ray's launcher accepts
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestrateError, Problem, SpecError
from orchestrator.language import build_any
from orchestrator.yamlload import load_text

# Problems about the whole file, which has no field to name (and, for the first group, no line:
# the file could not be read as text at all).
NO_LINE = ("the file is empty", "the file holds no YAML document", "the document is nested too deeply",
           # a file another names (an experiment's cluster:) that cannot be read as text at all
           "no such file", "is a ", "cannot read the file", "the file is larger than",
           "the file changed while", "the file is binary", "the file is not UTF-8")
NO_FIELD = NO_LINE + ("not valid YAML", "not valid text", "expected a YAML mapping at the top level",
                      "the document expands to more than", "the document holds more than",
                      "cannot tell what this file is",
                      "this is an experiment file",
                      # a tag or value on the document itself (nested ones name their field)
                      "unsupported tag", "unsupported value")


class PropertyFailure(AssertionError):
    pass


def check_problems(problems: list[Problem]) -> None:
    if not problems:
        raise PropertyFailure("a SpecError with no problem in it")
    for problem in problems:
        where = problem.format()
        if not problem.file:
            raise PropertyFailure(f"a problem names no file: {where}")
        if problem.line is None and not problem.message.startswith(NO_LINE):
            raise PropertyFailure(f"a problem names no line: {where}")
        if problem.line is not None and problem.line < 1:
            raise PropertyFailure(f"a problem names line {problem.line}: {where}")
        if not problem.field and not problem.message.startswith(NO_FIELD):
            raise PropertyFailure(f"a problem names no field: {where}")
        if problem.severity not in ("error", "warning"):
            raise PropertyFailure(f"a problem of severity {problem.severity!r}: {where}")


def check_document(text: str, path: Path, *, here: bool = False) -> Any:
    """Load and validate `text` as if it were the file at `path`: the spec, or None when the
    file was refused (correctly). Anything but an OrchestrateError fails the property."""
    try:
        doc = load_text(text, str(path))
        spec = build_any(doc, path, here=here)
    except SpecError as exc:
        check_problems(exc.problems)
        if all(p.severity == "warning" for p in exc.problems):
            raise PropertyFailure("a file refused with warnings only: "
                                  + "; ".join(p.format() for p in exc.problems)) from None
        return None
    except OrchestrateError as exc:
        if not exc.message:
            raise PropertyFailure(f"{type(exc).__name__} with no message") from None
        return None
    except Exception as exc:
        raise PropertyFailure(f"{type(exc).__name__} escaped: {exc}") from exc
    warnings = list(getattr(spec, "warnings", ()))
    cluster = getattr(spec, "cluster", None)
    warnings += list(getattr(cluster, "warnings", ()))
    if warnings:
        check_problems(warnings)
    return spec


def check_deterministic(text: str, name: str = "doc.yaml") -> dict[str, Any]:
    """`validate` of one file, twice, in a fresh folder: the same report both times."""
    from orchestrator.commands.validate import validate_file

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        first, second = validate_file(path), validate_file(path)
    if first != second:
        raise PropertyFailure(f"validate said two things of one file:\n{first}\n{second}")
    return first


def kuberay_verdict(config: dict[str, Any]) -> str | None:
    """What Ray's own KubeRay autoscaler config (the head pod's) says of the RayCluster."""
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    from orchestrator.launch.kuberay.manifests import ray_cluster

    try:
        _derive_autoscaling_config_from_ray_cr(ray_cluster(config))
    except Exception as exc:  # noqa: BLE001 - whatever Ray raises is the verdict
        return f"{type(exc).__name__}: {exc}"
    return None


def check_renders(spec: Any) -> None:
    """A valid cluster (or an experiment's or service's cluster) renders to a config that Ray's
    launcher accepts (needs `ray_launcher.ec2_catalogue()` around it for AWS)."""
    from orchestrator.language.cluster import ClusterSpec
    from orchestrator.render.cluster import render_cluster

    from .ray_launcher import ray_verdict

    cluster = spec if isinstance(spec, ClusterSpec) else getattr(spec, "cluster", None)
    if cluster is None:
        return
    try:
        config = render_cluster(cluster, token_file="/orchestrate/secrets/token").config
    except Exception as exc:
        raise PropertyFailure(f"a valid cluster did not render: {type(exc).__name__}: {exc}") from exc
    # a KubeRay cluster's RayCluster is read by Ray's autoscaler in the head pod
    verdict = kuberay_verdict(config) if cluster.provider == "kuberay" else ray_verdict(config)
    if verdict is not None:
        raise PropertyFailure(f"a valid cluster rendered to a config Ray refuses: {verdict}")
