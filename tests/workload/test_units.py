"""Workload pieces that need no Ray cluster: models, search spaces, results files, checkpoints."""
from __future__ import annotations

import json

from orchestrator.contract import RESULT_MARK
from orchestrator.workload import configs, models, results
from orchestrator.workload.train import tune_job


def test_vit_matches_torchvision_arguments_and_names():
    import torch

    vit = models.build_model({"name": "vit", "args": {
        "image_size": 32, "patch_size": 4, "num_layers": 2, "num_heads": 2, "hidden_dim": 16,
        "mlp_dim": 32, "num_classes": 10}})
    assert vit(torch.zeros(3, 3, 32, 32)).shape == (3, 10)
    names = set(vit.state_dict())
    for name in ("conv_proj.weight", "class_token", "encoder.pos_embedding",
                 "encoder.layers.encoder_layer_1.self_attention.in_proj_weight",
                 "encoder.layers.encoder_layer_0.mlp.3.weight", "encoder.ln.weight",
                 "heads.head.weight"):
        assert name in names
    assert vit.encoder.pos_embedding.shape == (1, 65, 16)


def test_mlp_and_cnn():
    import torch

    mlp = models.build_model({"name": "mlp", "args": {"hidden_dims": [8, 4], "num_classes": 3}}, 5)
    assert mlp(torch.zeros(2, 5)).shape == (2, 3)
    cnn = models.build_model({"name": "cnn", "args": {"width": 4}})
    assert cnn(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_search_space_and_merge():
    space = tune_job.search_space({"train_loop_config": {"lr": {"grid_search": [0.1, 0.01]},
                                                         "epochs": 3},
                                   "params": {"max_depth": {"randint": [1, 9]}}})
    assert space["train_loop_config"]["lr"] == {"grid_search": [0.1, 0.01]}
    assert space["train_loop_config"]["epochs"] == 3
    assert type(space["params"]["max_depth"]).__name__ == "Integer"
    merged = tune_job.merge({"train_loop_config": {"lr": 1, "epochs": 2}, "name": "x"},
                            {"train_loop_config": {"lr": 0.5}})
    assert merged == {"train_loop_config": {"lr": 0.5, "epochs": 2}, "name": "x"}


def test_finish_writes_history_plot_summary(tmp_path, capsys):
    history = [{"epoch": 1, "loss": 1.0, "accuracy": 0.5, "checkpoint": str(tmp_path / "c1")},
               {"epoch": 2, "loss": 0.5, "accuracy": 0.7, "checkpoint": str(tmp_path / "c2")}]
    summary = results.finish(str(tmp_path / "run"), {"name": "run", "status": "SUCCEEDED"}, history)
    folder = tmp_path / "run" / "orchestrate"
    assert (folder / "metrics.csv").read_text().splitlines()[0] == "epoch,loss,accuracy,checkpoint"
    assert (folder / "metrics.png").read_bytes().startswith(b"\x89PNG")
    assert json.loads((folder / "summary.json").read_text())["plot"] == summary["plot"]
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(RESULT_MARK)


def test_best_checkpoint_follows_the_score_and_ray_tie_rule(tmp_path):
    rows = []
    for epoch, accuracy in enumerate([0.5, 0.9, 0.9, 0.7]):
        (tmp_path / f"c{epoch}").mkdir()
        rows.append({"epoch": epoch, "accuracy": accuracy, "checkpoint": str(tmp_path / f"c{epoch}")})
    by_accuracy = {"checkpoint_score_attribute": "accuracy", "checkpoint_score_order": "max"}
    assert configs.best_from_history(rows, by_accuracy).endswith("c2")
    assert configs.best_from_history(rows, {}).endswith("c3")  # no score: the latest
    (tmp_path / "c2").rmdir()  # deleted by num_to_keep: not reported
    assert configs.best_from_history(rows, by_accuracy).endswith("c1")


def test_scaling_config_carries_every_field_of_the_section():
    section = {"num_workers": 3, "use_gpu": False, "resources_per_worker": {"CPU": 2},
               "placement_strategy": "SPREAD"}
    scaling = configs.scaling_config({"scaling_config": section})
    assert (scaling.num_workers, scaling.use_gpu, scaling.resources_per_worker,
            scaling.placement_strategy) == (3, False, {"CPU": 2}, "SPREAD")
    del section["placement_strategy"]
    assert configs.scaling_config({"scaling_config": section}).placement_strategy == "PACK"


def test_cache_choices_follow_the_setting_and_the_object_store():
    from orchestrator.workload.data import CACHE_SHARE, cache_by_default, choose_cache

    config = {"trainer": "torch", "train_loop_config": {"epochs": 3}, "tune": None,
              "datasets": {"train": {"path": "t", "cache": "auto"},
                           "valid": {"path": "v", "cache": "auto"},
                           "test": {"path": "x", "cache": True},
                           "extra": {"path": "y", "cache": False}}}
    assert cache_by_default(config)
    store = 1000 / CACHE_SHARE  # 1000 bytes may be cached
    choices = choose_cache(config, {"train": 600, "valid": 500}, store)
    assert choices["train"] == (True, "cached in Ray's object store (about 0.6 KiB)")
    assert choices["valid"][0] is False
    assert "(about 0.5 KiB, more than the 0.4 KiB of the object store left" in choices["valid"][1]
    assert choices["test"] == (True, None) and choices["extra"] == (False, None)
    assert choose_cache(config, {"train": None}, store)["train"] == \
        (False, "read again every epoch (its size is unknown)")
    for no_auto in ({"train_loop_config": {"epochs": 1}}, {"tune": {"param_space": {}}}):
        assert not cache_by_default({**config, **no_auto})
    # Retries on several nodes: a lost node's cached blocks cannot be rebuilt (tests/cluster/
    # test_faults.py lost a run to it), so nothing is cached unless the file says `true`.
    from orchestrator.workload.data import retried_across_nodes

    retries = {**config, "run_config": {"failure_config": {"max_failures": 2}}}
    assert retried_across_nodes(retries, 3)
    assert not retried_across_nodes(retries, 1) and not retried_across_nodes(config, 3)


def test_the_boosting_trainers_read_columns_once_and_never_cache_by_default(monkeypatch):
    from orchestrator.workload import data
    from orchestrator.workload.trainers import base

    asked = {}

    def ray_datasets(config, **how):
        asked.update(how)
        return data.Prepared({"train": None}, None, ["a", "y"], ["a"], None)

    monkeypatch.setattr(data, "check_paths", lambda config: None)
    monkeypatch.setattr(data, "ray_datasets", ray_datasets)
    for trainer in ("xgboost", "lightgbm"):
        asked.clear()
        _, job = base.boosting_job({"trainer": trainer, "label_column": "y", "datasets": {},
                                    "train_loop_config": {"epochs": 3}, "tune": None})
        assert asked == {"image": False, "vector": False, "cache_auto": False}
        assert job["num_boost_round"] == 10 and job["splits"] == ["train"]


def test_estimated_size_comes_from_the_files(tmp_path):
    from orchestrator.workload.data import EXPANSION, IMAGE_EXPANSION, estimated_bytes

    (tmp_path / "split").mkdir()
    (tmp_path / "split" / "a.parquet").write_bytes(b"x" * 100)
    (tmp_path / "split" / "b.parquet").write_bytes(b"x" * 50)
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    folder = {"format": "parquet", "path": str(tmp_path / "split")}
    assert estimated_bytes(folder, image=False) == 150 * EXPANSION["parquet"]
    assert estimated_bytes(folder, image=True) == 150 * EXPANSION["parquet"] * IMAGE_EXPANSION
    assert estimated_bytes({"format": "csv", "path": str(tmp_path / "t.csv")}, image=False) == 16
    assert estimated_bytes({"format": "csv", "path": "nosuchscheme://bucket/x"}, image=False) is None


def test_the_built_in_loop_normalises_uint8_batches_as_ray_data_did():
    import numpy as np
    import torch

    from orchestrator.workload import data
    from orchestrator.workload.trainers.torch import _from_shard

    images = np.random.default_rng(0).integers(0, 256, (6, 8, 8, 3), dtype=np.uint8)
    before = np.ascontiguousarray(data.normalize_images({data.IMAGE: images.copy()})[data.IMAGE])

    class Shard:
        def iter_torch_batches(self, batch_size, dtypes):
            for start in range(0, len(images), batch_size):
                part = images[start:start + batch_size]
                yield {data.IMAGE: torch.as_tensor(part, dtype=dtypes[data.IMAGE]),
                       "label": torch.zeros(len(part), dtype=dtypes["label"])}

    dtypes = {data.IMAGE: torch.uint8, "label": torch.long}
    batches = list(_from_shard(Shard(), 4, dtypes, data.IMAGE, "label", data.normalize_tensor, 0))
    x = torch.cat([x for x, _ in batches])
    assert [len(y) for _, y in batches] == [4, 2]
    assert x.dtype == torch.float32 and x.shape == (6, 3, 8, 8) and x.is_contiguous()
    assert torch.equal(x, torch.from_numpy(before))   # bit for bit: one model card, one input


def test_images_stay_uint8_in_ray_data_for_the_built_in_loop_only(monkeypatch):
    from types import SimpleNamespace

    from orchestrator.workload import data

    class Split:
        def __init__(self) -> None:
            self.mapped: list = []

        def schema(self, fetch_if_missing=True):   # parquet: known from its metadata
            return SimpleNamespace(names=[data.IMAGE, "label"])

        def map_batches(self, function, **options):
            self.mapped.append(function)
            return self

        def materialize(self):
            return self

    estimated = []
    monkeypatch.setattr(data, "read", lambda spec, one_block: Split())
    monkeypatch.setattr(data, "object_store_bytes", lambda: 1e12)
    monkeypatch.setattr(data, "alive_nodes", lambda: 1)
    monkeypatch.setattr(data, "estimated_bytes",
                        lambda spec, image: estimated.append(image) or 1.0)
    config = {"datasets": {"train": {"path": "t"}, "valid": {"path": "v"}}}
    for raw in (True, False):
        estimated.clear()
        prepared = data.ray_datasets(config, image=True, vector=True, cache_auto=True,
                                     raw_images=raw)
        for split in prepared.datasets.values():
            assert split.mapped == ([] if raw else [data.normalize_images])
        assert estimated == [not raw, not raw]   # uint8 images are a quarter of the size
        assert prepared.image and prepared.features == [data.IMAGE]


def test_only_the_built_in_loop_asks_for_images_as_read(monkeypatch, tmp_path):
    import ray.train.torch

    from orchestrator.workload import data
    from orchestrator.workload.trainers import torch as trainer

    asked = []

    def ray_datasets(config, **how):
        asked.append(how["raw_images"])
        return data.Prepared({"train": None}, None, [data.IMAGE, "label"], [data.IMAGE], None, True)

    monkeypatch.setattr(data, "check_paths", lambda config: None)
    monkeypatch.setattr(data, "ray_datasets", ray_datasets)
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", lambda loop, **options: loop)
    monkeypatch.setattr(trainer, "import_train_loop", lambda reference: lambda config: None)
    config = {"model": {"name": "vit", "args": {}}, "datasets": {"train": {"path": "t"}},
              "scaling_config": {"num_workers": 1, "use_gpu": False, "resources_per_worker": None}}
    trainer.make_trainer(config, None)
    trainer.make_trainer({**config, "train_loop": "mine:train"}, None)
    assert asked == [True, False]   # a user's loop gets the normalised images it always got


def test_parquet_is_read_with_the_reader_that_lists_files_once(monkeypatch):
    import ray.data

    from orchestrator.workload import data

    context = ray.data.DataContext.get_current()
    seen = []
    monkeypatch.setattr(ray.data, "read_parquet",
                        lambda path, **options: seen.append(context.use_datasource_v2))
    monkeypatch.setattr(context, "use_datasource_v2", True)
    data.read({"format": "parquet", "path": "/data/train"})
    data.read({"format": "parquet", "path": "/data/train", "read_options": {"skip_paths": []}})
    assert seen == [False, True]   # V1, unless an option only V2 has is asked for
    assert context.use_datasource_v2 is True   # Ray's setting is left as it was


def test_a_small_local_split_is_read_as_one_block(tmp_path):
    from orchestrator.workload import data

    small = tmp_path / "train.csv"
    small.write_text("a,b\n1,2\n")
    folder = tmp_path / "parts"
    folder.mkdir()
    for i in range(3):
        (folder / f"part-{i}.parquet").write_bytes(b"x" * 1000)
    large = tmp_path / "large.csv"
    with large.open("wb") as out:   # sparse: the size is what counts
        out.truncate(data.ONE_BLOCK_BYTES + 1)

    def options(path, **read_options):
        return data.read_options({"path": str(path), "read_options": read_options},
                                 one_block=True)

    assert options(small) == {"override_num_blocks": 1}
    assert options(folder, columns=["a"]) == {"columns": ["a"], "override_num_blocks": 1}
    assert data.file_bytes(str(folder)) == 3000
    # Ray's own block count: a large split, the user's own, a URI, a path not there
    assert options(large) == {}
    assert options(small, override_num_blocks=4) == {"override_num_blocks": 4}
    assert options("s3://bucket/train.csv") == {}
    assert options(tmp_path / "missing.csv") == {}
    # a Tune trial reads with Ray's block count
    assert data.read_options({"path": str(small)}, one_block=False) == {}
    assert not data.one_block_ok({"tune": {"param_space": {}}}) and data.one_block_ok({})


def test_a_checkpoint_inside_a_remote_filesystem_is_recorded_and_read_back_as_a_uri(tmp_path):
    """Ray Train's Checkpoint.path for s3:// or gs:// storage leaves the scheme out."""
    from orchestrator.workload import storage

    run = "s3://runs/team/mlp"
    assert storage.uri_in(run, "runs/team/mlp/checkpoint_1") == "s3://runs/team/mlp/checkpoint_1"
    assert storage.uri_in("gs://b/x", "b/x/checkpoint_1") == "gs://b/x/checkpoint_1"
    assert storage.uri_in("hdfs://name:8020/x", "/x/checkpoint_1") == \
        "hdfs://name:8020/x/checkpoint_1"
    assert storage.uri_in(run, "s3://runs/other") == "s3://runs/other"
    assert storage.uri_in("/local/runs/mlp", "/local/runs/mlp/c") == "/local/runs/mlp/c"
    assert storage.uri_in(run, "") == ""   # no checkpoint is not the bucket's root
    # a history written before the scheme was kept is read back with it
    local = tmp_path / "mlp"
    (local / "orchestrate").mkdir(parents=True)
    rows = [{"epoch": 1, "checkpoint": str(local / "checkpoint_1")}, {"epoch": 2}]
    (local / "orchestrate" / "metrics.json").write_text(json.dumps(rows))
    assert storage.read_history(str(local)) == rows
    # the same run as a URI (file:// is read as s3:// is, through pyarrow)
    (local / "orchestrate" / "metrics.json").write_text(json.dumps(rows))
    (local / "checkpoint_1").mkdir()
    [first, _] = storage.read_history(f"file://{local}")
    assert first["checkpoint"] == f"file://{local}/checkpoint_1"
    assert configs.best_from_history([first], {}) == first["checkpoint"]
