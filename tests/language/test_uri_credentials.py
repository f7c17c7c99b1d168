"""A storage or data URI with credentials in it (`s3://KEY:SECRET@bucket/...`) would travel in
the job's config, which Ray shows to everyone who may list jobs, and into MLflow's params: it is
refused where it is written (file, line, field), and the credentials are never echoed."""
from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.cli import main
from orchestrator.util.uris import has_credentials

KEY, SECRET = "AKIAEXAMPLEKEY", "wJalrXUtnSECRETKEY"
WITH_SECRET = f"s3://{KEY}:{SECRET}@bucket/data"


def experiment(folder: Path, **changes) -> Path:
    document = {"name": "creds", "trainer": "xgboost", "label_column": "target",
                "datasets": {"train": {"format": "csv", "path": "s3://bucket/train.csv"}},
                "run_config": {"storage_path": "s3://bucket/runs"}}
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        section = document
        for name in parents:
            section = section[name]
        section[last] = value
    path = folder / "creds.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_the_credentials_test():
    for uri in (WITH_SECRET, "gs://user:pw@bucket", "s3://:pw@b/x", "abfs://u:p@container/x",
                "S3://K:S@bucket", "s3://k:s@b?x=1"):
        assert has_credentials(uri), uri
    for path in ("s3://bucket/x", "gs://bucket/a@b", "/data/a@b", "relative/x:y@z", "",
                 "s3://bucket/path?x=1@2", "local:///mnt/data", "s3://b/x:y@z",
                 "s3://anonymous@ray-example-data/cifar10"):   # pyarrow's unsigned access
        assert not has_credentials(path), path


def test_credentials_in_a_dataset_or_storage_uri_are_refused_unechoed(tmp_path, capsys):
    cases = {"datasets__train__path": ("datasets.train.path", 7),
             "run_config__storage_path": ("run_config.storage_path", 9)}
    for key, (field, line) in cases.items():
        path = experiment(tmp_path, **{key: WITH_SECRET})
        for verb in ("validate", "render", "run"):
            assert main([verb, str(path)]) == 1, (verb, key)
            out, err = capsys.readouterr()
            [error] = [text for text in err.splitlines() if text.startswith("ERROR")]
            assert error.startswith(f"ERROR   {path}:{line}: {field}: the URI carries "
                                    f"credentials"), error
            assert KEY not in out + err and SECRET not in out + err


def test_credentials_in_a_service_or_predict_uri_are_refused_unechoed(tmp_path, capsys):
    service = tmp_path / "svc.yaml"
    for model in ({"run": WITH_SECRET}, {"checkpoint": WITH_SECRET}):
        service.write_text(yaml.safe_dump({"name": "svc", "model": model}))
        for verb in ("validate", "render", "serve"):
            assert main([verb, str(service)]) == 1, verb
            out, err = capsys.readouterr()
            assert f"model.{next(iter(model))}: the URI carries credentials" in err
            assert KEY not in out + err and SECRET not in out + err
    (tmp_path / "rows.csv").write_text("a\n1\n")
    for args in ([WITH_SECRET, "--data", str(tmp_path / "rows.csv"), "--output", "out"],
                 [str(tmp_path), "--data", WITH_SECRET, "--output", "out"],
                 [str(tmp_path), "--data", str(tmp_path / "rows.csv"), "--output", WITH_SECRET]):
        assert main(["predict", *args]) == 1
        out, err = capsys.readouterr()
        assert "the URI carries credentials" in err
        assert KEY not in out + err and SECRET not in out + err
