"""Hostile input, generated (Hypothesis): random YAML trees, and mutations of every example and
golden file, through the loader and every spec kind.

Properties: nothing but the project's own errors escapes; every problem names its file, line
and field; `validate` says the same of the same file twice; every cluster that validates renders
to a config Ray's own launcher accepts (prepare_config, the AWS resource fill-in, validate_config).

A few hundred examples per property, derandomized so that CI sees the same documents every run;
`benchmarks/fuzz.py` runs the same properties over 10,000+ documents.
"""
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import SpecError
from orchestrator.yamlload import load_text

from .differences import LOOSER
from .properties import check_deterministic, check_document, check_problems, check_renders
from .strategies import EXAMPLES, cluster_documents, example_mutations, yaml_texts

PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])
SOMEWHERE = Path("/nonexistent/orchestrate-fuzz/doc.yaml")


@PROPERTY
@given(yaml_texts())
def test_loader_raises_only_spec_errors_naming_file_and_line(text):
    try:
        doc = load_text(text, str(SOMEWHERE))
    except SpecError as exc:
        check_problems(exc.problems)
        return
    assert isinstance(doc.data, dict)
    assert all(isinstance(line, int) and line >= 1 for line, _column in doc.lines.values())


@PROPERTY
@given(yaml_texts())
def test_random_documents_are_refused_with_named_problems(text):
    check_document(text, SOMEWHERE)


@PROPERTY
@given(example_mutations())
def test_mutated_examples_are_refused_or_render_for_ray(ec2, mutated):
    text, path = mutated
    spec = check_document(text, path)
    if spec is not None:
        _renders(yaml.safe_load(text) if _parses(text) else {}, spec)


@PROPERTY
@given(cluster_documents())
def test_generated_clusters_are_refused_or_render_for_ray(ec2, doc):
    spec = check_document(yaml.safe_dump(doc), SOMEWHERE)
    if spec is not None:
        _renders(doc, spec)


@settings(PROPERTY, max_examples=150)
@given(st.one_of(yaml_texts(), example_mutations().map(lambda mutated: mutated[0]),
                 cluster_documents().map(yaml.safe_dump)))
def test_validate_is_deterministic(text):
    check_deterministic(text)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(EXAMPLES[0].parents[1])))
def test_every_example_as_it_is_holds_the_properties(path, ec2):
    """The seeds themselves: each example and golden file, unmutated."""
    text = path.read_text()
    spec = check_document(text, path)
    if spec is not None:
        _renders(yaml.safe_load(text), spec)
    check_deterministic(text, path.name)


def test_the_properties_can_fail():
    """The checks bite: a problem without a line, and a rendered config Ray refuses."""
    from orchestrator.errors import Problem
    from orchestrator.language.cluster import load_cluster

    from .properties import PropertyFailure

    with pytest.raises(PropertyFailure, match="names no line"):
        check_problems([Problem("f.yaml", "wrong", None, None, "max_workers")])
    with pytest.raises(PropertyFailure, match="names no field"):
        check_problems([Problem("f.yaml", "wrong", 3, None, "")])
    spec = load_cluster(Path(__file__).parents[2] / "cluster_configs" / "gcp.yaml")
    broken = type(spec)(path=spec.path, name=spec.name, provider=spec.provider,
                        document={**spec.document, "max_workers": "two"}, source=spec.source)
    with pytest.raises(PropertyFailure, match="Ray refuses"):
        check_renders(broken)


def _parses(text):
    try:
        return isinstance(yaml.safe_load(text), dict)
    except yaml.YAMLError:
        return False


def _renders(doc, spec):
    """check_renders, except where a documented difference says Ray refuses what validate
    accepts (tests/language/differences.py, LOOSER)."""
    if isinstance(doc, dict) and any(difference.applies(doc) for difference in LOOSER
                                     if "shorthand" not in difference.reason):
        return
    check_renders(spec)
