"""Fuzz the spec language: 10,000+ generated documents through the properties the tests check
with a few hundred (tests/language/test_generated.py, test_ray_agreement.py; the strategies and
the checks are theirs: tests/language/strategies.py, properties.py).

Per document: loading and validating raise nothing but the project's own errors, and every
problem names file, line and field; `validate` of the file twice says the same; a cluster that
validates renders to a config Ray's launcher accepts; a generated cluster file is accepted by
`validate` exactly when Ray's launcher accepts it, but for the documented differences.

    .venv/bin/python benchmarks/fuzz.py [--count 10000] [--seed 0]

Prints the count, the time per document, and every failure with its document; exits 1 if any.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.language.differences import LOOSER, STRICTER  # noqa: E402
from tests.language.properties import (  # noqa: E402
    PropertyFailure,
    check_deterministic,
    check_document,
    check_renders,
)
from tests.language.ray_launcher import ec2_catalogue, ray_verdict  # noqa: E402
from tests.language.strategies import cluster_documents, example_mutations, yaml_texts  # noqa: E402

SOMEWHERE = Path("/nonexistent/orchestrate-fuzz/doc.yaml")


def _excused(doc: Any) -> bool:
    return isinstance(doc, dict) and any(d.applies(doc) for d in LOOSER if "shorthand" not in d.reason)


def random_text(text: str) -> None:
    check_document(text, SOMEWHERE)
    check_deterministic(text)


def mutated_example(mutated: tuple[str, Path]) -> None:
    text, path = mutated
    spec = check_document(text, path)
    if spec is not None:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            doc = None
        if not _excused(doc):
            check_renders(spec)
    check_deterministic(text, path.name)


def generated_cluster(doc: dict[str, Any]) -> None:
    text = yaml.safe_dump(doc)
    spec = check_document(text, SOMEWHERE)
    if spec is not None and not _excused(doc):
        check_renders(spec)
    report = check_deterministic(text)
    ray = ray_verdict(doc)
    if report["valid"] != (ray is None):
        side = LOOSER if report["valid"] else STRICTER
        if not any(d.applies(doc) for d in side):
            raise PropertyFailure(f"undocumented disagreement with Ray: validate "
                                  f"{'accepts' if report['valid'] else 'refuses'}, Ray says {ray}")


def run(name: str, strategy: st.SearchStrategy[Any], check: Callable[[Any], None], count: int,
        start: int, failures: list[tuple[str, str, Any]]) -> int:
    done = 0

    @seed(start)
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(value: Any) -> None:
        nonlocal done
        done += 1
        try:
            check(value)
        except PropertyFailure as exc:
            failures.append((name, str(exc), value))
        except Exception:  # noqa: BLE001 - a bug in the checks themselves: report, keep going
            failures.append((name, traceback.format_exc(), value))

    each()
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="documents in all (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    share = -(-args.count // 3)
    kinds = [("random YAML trees, mutated as text", yaml_texts(), random_text),
             ("examples and golden files, mutated", example_mutations(), mutated_example),
             ("generated cluster files (and Ray's verdict)", cluster_documents(), generated_cluster)]
    failures: list[tuple[str, str, Any]] = []
    total, began = 0, time.perf_counter()
    with ec2_catalogue(), tempfile.TemporaryDirectory():
        for index, (name, strategy, check) in enumerate(kinds):
            started = time.perf_counter()
            done = run(name, strategy, check, share, args.seed + index, failures)
            spent = time.perf_counter() - started
            total += done
            print(f"{name}: {done} documents, {spent:.1f} s, {1000 * spent / max(done, 1):.2f} ms each",
                  flush=True)
    spent = time.perf_counter() - began
    print(f"total: {total} documents in {spent:.1f} s, {1000 * spent / max(total, 1):.2f} ms per document, "
          f"{len(failures)} failure(s)")
    for name, why, value in failures:
        print(f"\nFAILURE ({name}): {why}\ndocument: {value!r}"[:20_000])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
