"""A run folder is data, not code, on the operator's machine: `serve`, `render` and `predict`
read only its JSON here (the model card, the history, a checkpoint's metadata); the fitted
preprocessor is unpickled only where the job or the Serve replica runs, and only when its bytes
have the SHA-256 the run recorded in its card.

The crafted run is real files; its `preprocessor.bin` is a pickle whose `__reduce__` creates a
marker file, so "it ran" is a file on disk. Nothing here starts a Ray: `serve` and `predict`
are stopped where they would reach one (their one seam to a Ray, `open_target` /
`jobs_target`, answers with an error), after everything they do on this machine."""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import pickle
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.errors import JobError
from orchestrator.workload import card

BOUNDARY = "stopped where a Ray would be reached"


class Planted:
    """Unpickled, it creates the file `marker` (as `os.system` could run anything)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def crafted_run(folder: Path, marker: Path, *, digest: str | None = "right") -> tuple[Path, Path]:
    """A run folder (with a checkpoint and a card) whose preprocessor.bin creates `marker` when
    unpickled (legacy pickle format, base64 text, as Ray still reads it). `digest`: "right" (the
    card records the file's SHA-256, as a crafted folder can), a wrong one, or None (a card
    written before orchestrate recorded digests)."""
    run = folder / "run"
    checkpoint = run / "checkpoint_000000"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.ubj").write_bytes(b"not a model")
    (checkpoint / ".metadata.json").write_text(json.dumps({card.METADATA_KEY: str(run)}))
    results = run / "orchestrate"
    results.mkdir()
    payload = base64.b64encode(pickle.dumps(Planted(marker)))
    (results / "preprocessor.bin").write_bytes(payload)
    model = {"format_version": 1, "experiment": "crafted", "trainer": "xgboost", "model": None,
             "input_dim": 2, "image": False, "label_column": "target",
             "required_columns": ["a", "b"], "features": ["a", "b"],
             "task": "classification", "class_names": [0, 1], "objective": "binary:logistic",
             "preprocessor": "text", "checkpoint_config": {}}
    if digest is not None:
        model["preprocessor_sha256"] = (hashlib.sha256(payload).hexdigest() if digest == "right"
                                        else digest)
    (results / "model.json").write_text(json.dumps(model))
    (results / "metrics.json").write_text(json.dumps([{"epoch": 1, "checkpoint": str(checkpoint)}]))
    (results / "summary.json").write_text(json.dumps({"best_checkpoint": str(checkpoint)}))
    return run, checkpoint


def service(folder: Path, **model: str) -> Path:
    path = folder / "svc.yaml"
    path.write_text(yaml.safe_dump({"name": "svc", "model": model}))
    return path


@contextlib.contextmanager
def refused_ray(*args, **kwargs):
    raise JobError(BOUNDARY)
    yield   # pragma: no cover


def test_the_crafted_pickle_really_runs_when_unpickled(tmp_path):
    """The fixture is a real attack: unpickling the file creates the marker."""
    marker = tmp_path / "ran"
    run, _ = crafted_run(tmp_path, marker)
    pickle.loads(base64.b64decode((run / "orchestrate" / "preprocessor.bin").read_bytes()))
    assert marker.exists()


def test_render_and_serve_of_a_crafted_run_unpickle_nothing_here(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "ran"
    run, checkpoint = crafted_run(tmp_path, marker)
    assert main(["render", str(service(tmp_path, run=str(run)))]) == 0
    assert str(checkpoint) in capsys.readouterr().out   # it read the run's JSON to get there
    assert not marker.exists()

    monkeypatch.setattr("orchestrator.serving.serve.open_target", refused_ray)
    for model in ({"run": str(run)}, {"checkpoint": str(checkpoint)}):
        assert main(["serve", str(service(tmp_path, **model))]) == 1
        assert BOUNDARY in capsys.readouterr().err   # everything before the Ray was done
        assert not marker.exists()


def test_predict_of_a_crafted_run_unpickles_nothing_here(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "ran"
    run, checkpoint = crafted_run(tmp_path, marker)
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n")
    monkeypatch.setattr("orchestrator.serving.predict.jobs_target", refused_ray)
    for source in (run, checkpoint):
        assert main(["predict", str(source), "--data", str(tmp_path / "rows.csv"),
                     "--output", str(tmp_path / "out")]) == 1
        assert BOUNDARY in capsys.readouterr().err
        assert not marker.exists()


def test_the_job_refuses_a_preprocessor_that_is_not_the_one_the_run_wrote(tmp_path):
    marker = tmp_path / "ran"
    _, checkpoint = crafted_run(tmp_path, marker, digest="0" * 64)
    with pytest.raises(card.CardError) as refused:
        card.load(str(checkpoint))
    message = str(refused.value)
    assert "preprocessor.bin" in message and "sha256" in message
    assert "does not match" in message and str(tmp_path / "run") in message
    assert not marker.exists()


def test_the_job_refuses_a_card_without_a_digest(tmp_path, capsys):
    """A card written before orchestrate recorded the preprocessor's digest: refused, with the
    way out (train again, or record the digest of a run you trust)."""
    marker = tmp_path / "ran"
    _, checkpoint = crafted_run(tmp_path, marker, digest=None)
    with pytest.raises(card.CardError) as refused:
        card.load(str(checkpoint))
    message = str(refused.value)
    assert "records no digest" in message and "preprocessor_sha256" in message
    assert "run the experiment again" in message
    assert not marker.exists()

    service_file = service(tmp_path, checkpoint=str(checkpoint))   # `serve` says it first
    assert main(["serve", str(service_file)]) == 1
    err = capsys.readouterr().err
    assert f"{service_file}:" in err and "model: the model card of the run" in err
    assert "records no digest" in err and not marker.exists()


def test_a_digest_that_matches_is_unpickled_in_the_job(tmp_path):
    """The job's side does unpickle what the card vouches for (here, the crafted file with its
    own digest: the digest proves the file is the run's, not that the run is honest)."""
    marker = tmp_path / "ran"
    _, checkpoint = crafted_run(tmp_path, marker)
    card.load(str(checkpoint))
    assert marker.exists()


def test_every_torch_load_says_weights_only():
    """A checkpoint's model.pt is a pickle too: every `torch.load` of orchestrate (and of its
    tests) passes `weights_only=True` explicitly, whatever torch's default of the day."""
    import ast

    import orchestrator

    roots = (Path(orchestrator.__file__).parent, Path(__file__).resolve().parents[1])
    calls = []
    for root in roots:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "load" and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id == "torch":
                    flag = next((k.value for k in node.keywords if k.arg == "weights_only"), None)
                    explicit = isinstance(flag, ast.Constant) and flag.value is True
                    calls.append((f"{path}:{node.lineno}", explicit))
    assert len(calls) >= 3   # the trainer's resume (2) and its load for predict and serve
    assert [where for where, explicit in calls if not explicit] == []


def test_a_planted_model_pt_is_not_unpickled(tmp_path):
    import torch

    from orchestrator.workload.trainers import torch as torch_trainer

    marker = tmp_path / "ran"
    checkpoint = tmp_path / "checkpoint_000000"
    checkpoint.mkdir()
    torch.save(Planted(marker), checkpoint / "model.pt")
    model_card = {"model": {"name": "mlp", "args": {"hidden_dims": [4], "num_classes": 2}},
                  "input_dim": 2}
    with pytest.raises(pickle.UnpicklingError):
        torch_trainer.load(str(checkpoint), model_card, use_gpu=False)
    assert not marker.exists()
