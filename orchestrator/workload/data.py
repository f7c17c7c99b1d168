"""Datasets for the job: Ray Data pipelines, or in-memory tensors for a torch DataLoader.

Images (`image`: uint8 HxWx3) are normalised as in the tutorial: ToTensor then Normalize(0.5, 0.5),
i.e. CHW float32 in [-1, 1]: by a Ray Data map for a user's train loop, by the built-in loop on
each batch (`normalize_tensor`, the same values), so Ray Data moves the uint8 images as read.
Tabular features are every column but the label (or `feature_columns`), after the
preprocessors, which are fitted on the train split only. `format: images` (folders of image
files) is read by `workload.images` into the same `image`/`label` columns.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..contract import DatasetSection, JobConfig
from ..util.text import size_text
from ..util.uris import is_uri
from . import images, storage
from .images import estimated_image_bytes, read_images

FEATURES = "features"  # the column holding the concatenated tabular features
IMAGE = images.IMAGE   # the column of images
IMAGES = images.IMAGES  # the format of a split of image files, which `images` reads
resolve = storage.resolve
SCALERS = ("StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler", "Normalizer",
           "PowerTransformer", "SimpleImputer")


def absolute_paths(config: JobConfig) -> JobConfig:
    """The config with dataset paths made absolute here, in the driver: Train V2 workers and Tune
    trials run in artifact folders, not in the working directory."""
    datasets: dict[str, DatasetSection] = {name: {**spec, "path": resolve(spec["path"])}
                                           for name, spec in (config.get("datasets") or {}).items()}
    return {**config, "datasets": datasets}  # a new JobConfig; the caller's is left as it was


# Ray Data 2.60's parquet reader (its "datasource V2", the default) lists the files again on
# every pass over a dataset, in a task that starts a pool of FooterReader actors (up to 32) to
# read the footers: a split streamed every epoch (`cache: false`) started ~5 worker processes
# per split and epoch on a 2-core machine, most of an epoch's wait for data. The V1 reader reads
# the footers once, when the dataset is made. V2 alone takes these options:
PARQUET_V2_ONLY = ("ignore_missing_paths", "skip_paths")


# Ray Data splits what it reads into about twice as many blocks as the cluster has CPUs (a
# 100 KiB CSV became 8 blocks on the 4-CPU embedded Ray), and each later pass (the
# preprocessors, the feature concatenation) runs a task per block, so a small split started up to
# 5 worker processes in a run that needs one or two: 2 CPU-s of a warm small run's 24 (measured
# with process accounting, 2026-11-29). A local split this small is read as one block; the
# user's `override_num_blocks` in `read_options` wins, and a URI's size is not looked up.
# Not inside a Tune trial: there Ray Data's tasks are submitted in the trial's placement group,
# and a preprocessor's fit over one block once failed as Ray 2.60's hash aggregation submitted
# its map task, for a block whose location was not known yet, into that group, where its CPU
# does not fit ("Cannot schedule _shuffle_map_task with the placement group"; 1 trial of 2 in
# one CI run); with Ray's own block count that was never seen.
ONE_BLOCK_BYTES = 16 * 1024 * 1024


def one_block_ok(config: JobConfig) -> bool:
    """Whether a small split may be read as one block (see ONE_BLOCK_BYTES): not in Tune."""
    return not config.get("tune")


def read(spec: DatasetSection, *, one_block: bool = False, label: str = "label") -> Any:
    """A split as a Ray Dataset; `label`: the label column an images split gets."""
    import ray.data

    readers = {"parquet": ray.data.read_parquet, "csv": ray.data.read_csv,
               "json": ray.data.read_json, "numpy": ray.data.read_numpy}
    fmt = spec.get("format", "parquet")
    if fmt == IMAGES:
        return read_images(spec, label)
    if fmt not in readers:
        raise ValueError(f"unknown dataset format {fmt!r}; one of {', '.join(readers)}, "
                         f"{IMAGES}")
    options = read_options(spec, one_block=one_block)
    context = ray.data.DataContext.get_current()
    v2 = context.use_datasource_v2
    context.use_datasource_v2 = fmt == "parquet" and any(k in options for k in PARQUET_V2_ONLY)
    try:
        return readers[fmt](resolve(spec["path"]), **options)
    finally:
        context.use_datasource_v2 = v2


def read_options(spec: DatasetSection, *, one_block: bool) -> dict[str, Any]:
    """The reader's keyword arguments: the user's `read_options`, and, when `one_block`, one
    block for a small local split (see ONE_BLOCK_BYTES)."""
    options = dict(spec.get("read_options") or {})
    if one_block and "override_num_blocks" not in options and "parallelism" not in options \
            and not is_uri(spec["path"]):
        size = file_bytes(spec["path"])
        if size is not None and size <= ONE_BLOCK_BYTES:
            options["override_num_blocks"] = 1
    return options


def check_paths(config: JobConfig) -> None:
    """Fail early, with the path in the message, when a local dataset path does not exist."""
    for name, spec in (config.get("datasets") or {}).items():
        path = resolve(spec["path"])
        if not is_uri(path) and not os.path.exists(path):
            raise FileNotFoundError(f"dataset {name!r}: {spec['path']} does not exist "
                                    f"(looked in {path})")


def build_preprocessor(specs: list[dict[str, Any]] | None, features: list[str]) -> Any:
    """`[{type: StandardScaler, columns: [...]}, ...]` -> one Ray Data preprocessor, or None.
    A scaler without `columns` applies to every feature column."""
    if not specs:
        return None
    import ray.data.preprocessors as module

    steps: list[Any] = []
    for spec in specs:
        kwargs = {k: v for k, v in spec.items() if k != "type"}
        if spec["type"] in SCALERS and "columns" not in kwargs:
            kwargs["columns"] = features
        cls = getattr(module, spec["type"], None)
        if cls is None:
            raise ValueError(f"unknown preprocessor {spec['type']!r}")
        steps.append(cls(**kwargs))
    return steps[0] if len(steps) == 1 else module.Chain(*steps)


# Ray Data finds an unknown schema (`Dataset.schema()` of a CSV or JSON read, of a transformed
# split) by running the plan with a Limit[1] and cancelling the tasks still in flight. Under load
# that cancellation meets a race in Ray's core worker (RAY_CHECK "submitted_task_ref_count > 0"
# in reference_counter.cc, ray-project/ray#56123 fixed one path of it) that aborts the driver:
# seen in about 1 of 40 runs with two runs at once on 2 cores. So the columns are found without
# a Limit: from the format's metadata when it has them (parquet), else the train split is read
# once into the object store (`materialize`, the same full pass the preprocessors' fit makes,
# which later passes then read from memory), and a split's columns after the preprocessors come
# from the fitted preprocessors applied to its first row, taken from that store (no task).


def materialize_ok(config: JobConfig, image: bool) -> bool:
    """Whether the train split may be read into the object store to find its columns: not
    images (they may not fit), not inside a Tune trial (the trial's placement group has no CPU
    for Ray Data's tasks; Ray's `schema()` then, as before)."""
    return not image and not config.get("tune")


def with_columns(dataset: Any, *, materialize: bool = False) -> tuple[Any, list[str]]:
    """(the dataset, its column names) without a Limit[1] run when `materialize`: a dataset
    whose schema is unknown comes back materialised; else Ray's `schema()`."""
    known = dataset.schema(fetch_if_missing=False)
    if known is None and materialize:
        dataset = dataset.materialize()
    if known is None:
        known = dataset.schema()
    return dataset, list(known.names)


def columns_after(preprocessor: Any, dataset: Any) -> list[str]:
    """The columns of `preprocessor.transform(dataset)`: its fitted steps applied to the first
    row of a materialised dataset (no task); of a lazy one, Ray's own `schema()`."""
    first = first_rows(dataset)
    if first is None:
        return list(preprocessor.transform(dataset).schema().names)
    return [str(c) for c in preprocessor.transform_batch(first).columns]


def first_rows(dataset: Any, count: int = 1) -> Any:
    """A pandas DataFrame of the first rows of a materialised dataset, read from the object
    store; None for a lazy or empty one."""
    import ray
    from ray.data.block import BlockAccessor
    from ray.data.dataset import MaterializedDataset

    if not isinstance(dataset, MaterializedDataset):
        return None
    for bundle in dataset.iter_internal_ref_bundles():
        for ref in bundle.block_refs:
            block = BlockAccessor.for_block(ray.get(ref))
            if block.num_rows():
                return BlockAccessor.for_block(block.slice(0, min(count, block.num_rows()))) \
                    .to_pandas()
    return None


def fit_preprocessor(config: JobConfig, train: Any, columns: list[str] | None = None) -> Any:
    """The experiment's preprocessors fitted on `train` (whose columns are `columns`, if
    known), or None."""
    if not config.get("preprocessors"):
        return None
    if columns is None:
        train, columns = with_columns(train)
    features = feature_columns(config, columns)
    preprocessor = build_preprocessor(config["preprocessors"], features)
    if preprocessor is not None:
        preprocessor = preprocessor.fit(train)
    return preprocessor


def feature_columns(config: Mapping[str, Any], columns: list[str]) -> list[str]:
    """`config`: the JobConfig, or the part of it the torch loop ships (see `load_tensors`)."""
    label = config.get("label_column")
    return list(config.get("feature_columns") or [c for c in columns if c != label])


def normalize_images(batch: dict[str, Any]) -> dict[str, Any]:
    """A numpy batch's uint8 NxHxWxC `image`s as float32 NxCxHxW in [-1, 1]."""
    import numpy as np

    batch[IMAGE] = _normalized(np.asarray(batch[IMAGE], dtype=np.float32)).transpose(0, 3, 1, 2)
    return batch


def normalize_tensor(images: Any) -> Any:
    """`normalize_images` for a torch uint8 NxHxWxC tensor, the same float32 values (the same
    operations in the same order); contiguous NxCxHxW, as Ray Data hands normalised images over."""
    import torch

    return _normalized(images.to(torch.float32)).permute(0, 3, 1, 2).contiguous()


def _normalized(images: Any) -> Any:
    """ToTensor then Normalize(0.5, 0.5) on float32 pixel values 0-255 (numpy or torch)."""
    return (images / 255.0 - 0.5) / 0.5


@dataclass(frozen=True)
class Prepared:
    """The splits ready for the trainer, and what prediction needs to prepare data the same way
    (the model card: `workload.card`)."""
    datasets: dict[str, Any]
    preprocessor: Any              # fitted on train, or None
    columns: list[str]             # the train split's columns as read
    features: list[str]            # what the model takes, after the preprocessor, in order
    input_dim: int | None          # the feature count a built-in tabular model was built for
    image: bool = False            # the model takes images (`IMAGE`), not tabular features


def ray_datasets(config: JobConfig, *, image: bool, vector: bool, cache_auto: bool,
                 raw_images: bool = False) -> Prepared:
    """Read, fit preprocessors on train, transform every split, cache what fits (see `cache`).
    The trainer says how its model takes the data: `image`s (normalised here, or left uint8 as
    read when the loop normalises each batch itself: `raw_images`), or tabular features as one
    float32 `vector` column (`FEATURES`) or as columns; `cache_auto`: whether `cache: auto`
    splits may be cached (`cache_by_default`)."""
    label = config.get("label_column") or "label"
    datasets = {name: read_images(spec, label) if spec.get("format") == IMAGES
                else read(spec, one_block=one_block_ok(config))
                for name, spec in config["datasets"].items()}
    if config["datasets"]["train"].get("format") == IMAGES:
        columns = [IMAGE, label]   # what `read_images` makes: no schema run needed
    else:
        datasets["train"], columns = with_columns(datasets["train"],
                                                  materialize=materialize_ok(config, image))
    preprocessor = fit_preprocessor(config, datasets["train"], columns)
    after = columns if preprocessor is None or image else \
        columns_after(preprocessor, datasets["train"])
    if preprocessor is not None:
        datasets = {k: preprocessor.transform(v) for k, v in datasets.items()}
    features = [IMAGE] if image else feature_columns(config, after)
    input_dim = None
    if image:
        if not raw_images:
            datasets = {k: v.map_batches(normalize_images, batch_format="numpy")
                        for k, v in datasets.items()}
    elif vector:
        import numpy as np
        from ray.data.preprocessors import Concatenator

        concat = Concatenator(columns=features, output_column_name=FEATURES,
                              dtype=np.float32)  # type: ignore[arg-type]  # as in Ray's own docs
        datasets = {k: concat.transform(v) for k, v in datasets.items()}
        input_dim = len(features)
    return Prepared(cache(config, datasets, image and not raw_images, cache_auto), preprocessor,
                    columns, features, input_dim, image)


# `cache: auto` estimates a split's size in memory from its files: Ray's own default guess for
# parquet's encoding ratio (5), 2 for text formats; normalised images grow 4x more (uint8 ->
# float32).
EXPANSION = {"parquet": 5.0, "numpy": 1.0}
IMAGE_EXPANSION = 4.0
CACHE_SHARE = 0.25  # of the cluster's object store, for all cached splits together


def cache(config: JobConfig, datasets: dict[str, Any], image: bool,
          cache_auto: bool) -> dict[str, Any]:
    """Materialise the preprocessed splits `choose_cache` picks in Ray's object store, so later
    epochs neither read nor preprocess them again (Ray Train's data guide recommends this for
    data that fits in the object store). `image`: the splits hold normalised (float32) images."""
    specs = config["datasets"]
    auto = [name for name in datasets if specs[name].get("cache", "auto") == "auto"] \
        if cache_auto else []
    if auto and retried_across_nodes(config, alive_nodes()):
        print("orchestrate: datasets read again every epoch, not cached: this run retries after "
              "failures on several nodes, and a lost node's cached blocks could not be rebuilt "
              "(cache: true caches anyway)", flush=True)
        auto = []
    estimates = {name: estimated_bytes(specs[name], image) for name in auto}
    choices = choose_cache(config, estimates, object_store_bytes() if auto else 0.0)
    for name, (_, why) in choices.items():
        if why:
            print(f"orchestrate: dataset {name!r}: {why}", flush=True)
    return {name: dataset.materialize() if choices[name][0] else dataset
            for name, dataset in datasets.items()}


def cache_by_default(config: JobConfig) -> bool:
    """`cache: auto` may cache: a run of more than one epoch that is not a Tune trial
    (concurrent trials would each hold a copy). The torch trainer asks this; the boosting
    trainers read their data once and never cache by default."""
    epochs = (config.get("train_loop_config") or {}).get("epochs", 1)
    return not config.get("tune") and isinstance(epochs, int) and epochs > 1


def retried_across_nodes(config: JobConfig, nodes: int) -> bool:
    """A run that retries after failures on a Ray of several nodes: `cache: auto` caches none of
    its splits. Cached blocks live on the nodes that made them, and Ray cannot rebuild a lost
    node's (the train workers only borrowed them), so every retry after a node is lost would
    fail on them."""
    failures = ((config.get("run_config") or {}).get("failure_config") or {}).get("max_failures", 0)
    return nodes > 1 and bool(failures)


def alive_nodes() -> int:
    ray = _ray()
    nodes: list[dict[str, Any]] = ray.nodes()
    return len([node for node in nodes if node.get("Alive")])


def choose_cache(config: JobConfig, estimates: dict[str, float | None],
                 object_store: float) -> dict[str, tuple[bool, str | None]]:
    """Per split: (cache it?, why, for the job's log). `true` and `false` are obeyed; `auto`
    splits (those in `estimates`) are cached in order while their estimated sizes fit in
    CACHE_SHARE of the object store."""
    budget = object_store * CACHE_SHARE
    choices: dict[str, tuple[bool, str | None]] = {}
    for name, spec in config["datasets"].items():
        if name not in estimates:
            choices[name] = (spec.get("cache", "auto") is True, None)
            continue
        size = estimates[name]
        if size is None:
            choices[name] = (False, "read again every epoch (its size is unknown)")
        elif size <= budget:
            budget -= size
            choices[name] = (True, f"cached in Ray's object store (about {size_text(size)})")
        else:
            choices[name] = (False, f"read again every epoch (about {size_text(size)}, more than the "
                                    f"{size_text(budget)} of the object store left for caching)")
    return choices


def estimated_bytes(spec: DatasetSection, image: bool) -> float | None:
    """The split's size in memory, guessed from the size of its files; None if unknown.
    `image`: it holds images normalised to float32."""
    if spec.get("format") == IMAGES:
        decoded = estimated_image_bytes(spec)
        return None if decoded is None else decoded * (IMAGE_EXPANSION if image else 1)
    size = file_bytes(spec["path"])
    if size is None:
        return None
    return size * EXPANSION.get(spec.get("format", "parquet"), 2.0) * (IMAGE_EXPANSION if image else 1)


def file_bytes(path: str) -> int | None:
    """The bytes of a split's file, or of the files under its folder (a URI's too); None if
    they cannot be listed."""
    import pyarrow.fs

    try:
        fs, inner = pyarrow.fs.FileSystem.from_uri(resolve(path))  # local paths too
        info = fs.get_file_info(inner)
        if info.type == pyarrow.fs.FileType.NotFound:
            return None
        files = [info] if info.type == pyarrow.fs.FileType.File else \
            fs.get_file_info(pyarrow.fs.FileSelector(inner, recursive=True))
    except (OSError, ValueError, pyarrow.ArrowException):
        return None
    return sum(f.size or 0 for f in files if f.type == pyarrow.fs.FileType.File)


def _ray() -> Any:
    """Ray, connected (the job's driver normally is already)."""
    import ray

    if not ray.is_initialized():
        ray.init()
    return ray


def object_store_bytes() -> float:
    ray = _ray()
    return float(ray.cluster_resources().get("object_store_memory", 0))


def image_array(column: Any) -> Any:
    """A pandas column (or numpy array) of HxWxC images as one NxHxWxC array."""
    import numpy as np

    values = column.to_numpy() if hasattr(column, "to_numpy") else column
    return np.stack([np.asarray(x) for x in values]) if values.dtype == object else values


def load_tensors(config: Mapping[str, Any], split: str, preprocessor: Any,
                 image: bool) -> tuple[Any, Any]:
    """One split as (features, labels) tensors, for a torch DataLoader (variant A). `config` needs
    `datasets`, `label_column` and `feature_columns`."""
    import numpy as np
    import pyarrow.dataset
    import ray.data  # noqa: F401  registers Ray's tensor column type with pyarrow
    import torch

    spec = config["datasets"][split]
    label = config.get("label_column") or "label"
    if spec.get("format") == IMAGES:
        frame = read(spec, label=label).to_pandas()
    else:
        frame = pyarrow.dataset.dataset(resolve(spec["path"]),
                                        format=spec.get("format", "parquet")).to_table().to_pandas()
    if preprocessor is not None:
        frame = preprocessor.transform_batch(frame)
    labels = torch.as_tensor(frame[label].to_numpy(), dtype=torch.long)
    if image:
        features = normalize_images({IMAGE: image_array(frame[IMAGE])})[IMAGE]
    else:
        columns = feature_columns(config, list(frame.columns))
        features = frame[columns].to_numpy(dtype=np.float32)
    return torch.as_tensor(np.ascontiguousarray(features)), labels
