"""`format: images`: image files as a dataset, read with Ray Data's `read_images`.

A split is a folder of class folders (`train/cat/001.png`: the label is the folder's name), or a
listing: a CSV or parquet file with a `path` column and the label column, the paths relative to
the listing's folder (or absolute, or URIs). The images reach the workers as the image parquet
path has them (`data.IMAGE`: uint8 HxWx3, resized to the model's `image_size`, RGB) with the
label as the index of its class among the train split's class names, sorted, which the job's
driver finds once (`with_image_classes`) and the model card records. `decode_image` reads an
uploaded image (`serve`) the same way, within size limits.
"""
from __future__ import annotations

import functools
import io
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..contract import DatasetSection, JobConfig
from ..util.text import size_text
from ..util.uris import is_uri
from . import models
from .storage import resolve

IMAGES = "images"               # the dataset format
IMAGE = "image"                 # the column of images, as in the image parquet path (`data`)
PATH = "path"                   # a listing's column of files, and predict's column of them
LISTING_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
EXTENSIONS = ("png", "jpg", "jpeg", "tif", "tiff", "bmp", "gif")   # read_images' own
MAX_UPLOAD_BYTES = 20 * 1024 * 1024     # an uploaded image's body
MAX_PIXELS = 64 * 1024 * 1024           # its width x height, read from its header before decoding


@dataclass(frozen=True)
class ImageLayout:
    """Where an images split's files and labels are."""
    root: str                   # the folder of class folders, or the listing's folder
    listing: str | None = None  # the listing (CSV or parquet); None: a folder of class folders

    @property
    def listing_format(self) -> str | None:
        return listing_format(self.listing) if self.listing else None


def listing_format(path: str) -> str | None:
    """"csv" or "parquet" for a listing's file name, None for anything else (a folder)."""
    return LISTING_FORMATS.get(os.path.splitext(path.rstrip("/"))[1].lower())


def image_layout(path: str) -> ImageLayout:
    """The layout of an images split at `path` (a folder, or a .csv/.parquet listing)."""
    found = resolve(path).rstrip("/")
    if listing_format(found):
        return ImageLayout(found.rsplit("/", 1)[0], found)
    return ImageLayout(found)


def read_listing(layout: ImageLayout, label: str | None) -> Any:
    """A listing as a pandas DataFrame: `path` made absolute (relative to the listing's folder),
    and `label` (when asked) as strings; ValueError naming the listing and what it lacks."""
    import pyarrow.dataset

    assert layout.listing is not None
    frame = pyarrow.dataset.dataset(layout.listing, format=layout.listing_format) \
        .to_table().to_pandas()
    missing = [c for c in (PATH, label) if c is not None and c not in frame.columns]
    if missing:
        raise ValueError(f"the image listing {layout.listing} has no column "
                         f"{', '.join(repr(c) for c in missing)} (it has: "
                         f"{', '.join(map(str, frame.columns))}); a listing gives each image's "
                         f"{PATH!r} and its label")
    frame[PATH] = [p if is_uri(p) or os.path.isabs(p) else f"{layout.root}/{p}"
                   for p in frame[PATH].astype(str)]
    if label is not None:
        frame[label] = frame[label].astype(str)
    return frame


def image_files(root: str) -> list[str]:
    """The image files under a folder, as paths relative to it, the ones `read_images` reads:
    by extension (any case), none under a name starting with "." or "_" (Ray Data skips them)."""
    import pyarrow.fs

    fs, inner = pyarrow.fs.FileSystem.from_uri(root)
    found = fs.get_file_info(pyarrow.fs.FileSelector(inner, recursive=True))
    base = inner.rstrip("/") + "/"
    files = [f.path[len(base):] for f in found if f.type == pyarrow.fs.FileType.File
             and f.extension.lower() in EXTENSIONS and f.path.startswith(base)]
    return [f for f in files if not any(part.startswith((".", "_")) for part in f.split("/"))]


def classes_of(layout: ImageLayout, label: str) -> list[str]:
    """The class names of a split, sorted: its listing's labels, or the folders its images are
    in; ValueError for a folder without images, or with one that is not in a class folder."""
    if layout.listing is not None:
        return sorted(set(read_listing(layout, label)[label]))
    files = image_files(layout.root)
    astray = [f for f in files if f.count("/") != 1]
    if astray or not files:
        where = f"{layout.root}/{astray[0]} is not in one" if astray else \
            f"the image folder {layout.root} holds no image files"
        raise ValueError(f"{where}: a folder of images holds one folder per class, named after "
                         f"it, with the class's images directly inside (train/cat/001.png); or "
                         f"list the images in a CSV with columns {PATH},label")
    return sorted({f.split("/", 1)[0] for f in files})


def is_images(spec: Mapping[str, Any]) -> bool:
    return spec.get("format") == IMAGES


def with_image_classes(config: JobConfig) -> JobConfig:
    """The config with each images split's `classes` (the train split's, sorted) and
    `image_size` (the built-in model's), and a built-in image model's `num_classes` as many as
    the classes; ValueError for a split with a class the train split lacks, or a model with
    another class count. Run once, in the job's driver (Tune trials get the result)."""
    specs = config.get("datasets") or {}
    if not any(is_images(spec) for spec in specs.values()):
        return config
    train = specs.get("train")
    if train is None or not is_images(train):
        raise ValueError("the train split must be format: images when another split is: the "
                         "class names come from it")
    label = config.get("label_column") or "label"
    classes = classes_of(image_layout(train["path"]), label)
    for name, spec in specs.items():
        if name != "train" and is_images(spec):
            extra = sorted(set(classes_of(image_layout(spec["path"]), label)) - set(classes))
            if extra:
                raise ValueError(f"dataset {name!r} has class(es) {', '.join(map(repr, extra))} "
                                 f"that the train split lacks (train has: {', '.join(classes)}); "
                                 f"the model can only learn the train split's classes")
    size = models.image_size(config.get("model"))
    datasets: dict[str, DatasetSection] = {
        name: {**spec, "classes": classes, "image_size": size} if is_images(spec) else spec
        for name, spec in specs.items()}
    model = config.get("model")
    if models.is_image_model(model):
        assert model is not None
        args = dict(model.get("args") or {})
        given = args.setdefault("num_classes", len(classes))
        if int(given) != len(classes):
            raise ValueError(f"model num_classes is {given}, but the train split has "
                             f"{len(classes)} classes ({', '.join(classes[:20])}): leave "
                             f"num_classes out (it is then the number of classes) or make it "
                             f"{len(classes)}")
        model = {**model, "args": args}
    return {**config, "datasets": datasets, "model": model}


def read_images(spec: DatasetSection, label: str = "label", *, names: bool = False) -> Any:
    """An images split as a Ray Dataset of `image` (uint8 HxWx3, resized to the spec's
    `image_size`, RGB) and `label` (the class's index in the spec's `classes`; with `names`,
    the class's name, and the `path` of each file: predict's --evaluate). A spec without
    `classes` (predict's data) has no labels: `image` and `path`, the file each came from."""
    import ray.data
    from ray.data.datasource.partitioning import Partitioning, PartitionStyle

    layout = image_layout(spec["path"])
    options: dict[str, Any] = {"mode": "RGB", **(spec.get("read_options") or {})}
    if spec.get("image_size"):
        options["size"] = (spec["image_size"], spec["image_size"])
    classes = spec.get("classes")
    if classes is None:
        files = layout.root if layout.listing is None else \
            list(read_listing(layout, None)[PATH])
        return ray.data.read_images(files, include_paths=True, **options)
    index = {name: i for i, name in enumerate(classes)}
    if layout.listing is None:
        found = ray.data.read_images(layout.root, include_paths=names, partitioning=Partitioning(
            PartitionStyle.DIRECTORY, field_names=[label], base_dir=layout.root), **options)
        return found if names else found.map_batches(
            functools.partial(_class_indices, index=index, label=label), batch_format="numpy")
    listing = read_listing(layout, label)
    by_path = {_bare(p): c for p, c in zip(listing[PATH], listing[label], strict=True)}
    found = ray.data.read_images(list(listing[PATH]), include_paths=True, **options)
    return found.map_batches(functools.partial(_listed_labels, by_path=by_path, label=label,
                                               index=None if names else index),
                             batch_format="numpy")


def _bare(path: str) -> str:
    """A path as Ray Data reports it (a URI without its scheme)."""
    return path.split("://", 1)[-1]


def _class_indices(batch: dict[str, Any], *, index: dict[str, int], label: str) -> dict[str, Any]:
    import numpy as np

    unknown = sorted({str(v) for v in batch[label]} - set(index))
    if unknown:
        raise ValueError(f"class folder(s) {', '.join(map(repr, unknown))} that the train split "
                         f"lacks")
    batch[label] = np.asarray([index[str(v)] for v in batch[label]], dtype=np.int64)
    return batch


def _listed_labels(batch: dict[str, Any], *, by_path: dict[str, str], label: str,
                   index: dict[str, int] | None) -> dict[str, Any]:
    """A listing's labels for a batch of its images: class indices, or (`index` None) the
    names with each image's path."""
    import numpy as np

    labels = [by_path[_bare(str(p))] for p in batch[PATH]]
    if index is None:
        return {IMAGE: batch[IMAGE], label: np.asarray(labels), PATH: batch[PATH]}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise ValueError(f"image(s) of class(es) {', '.join(map(repr, unknown))} that the "
                         f"train split lacks")
    return {IMAGE: batch[IMAGE], label: np.asarray([index[c] for c in labels], dtype=np.int64)}


def image_count(spec: DatasetSection) -> int | None:
    """How many images a split has (its listing's rows, or its folder's image files); None if
    they cannot be listed."""
    import pyarrow

    layout = image_layout(spec["path"])
    try:
        return len(read_listing(layout, None) if layout.listing else image_files(layout.root))
    except (OSError, ValueError, pyarrow.ArrowException):
        return None


def estimated_image_bytes(spec: DatasetSection) -> float | None:
    """An images split's size in memory as uint8 at its `image_size`; None when unknown."""
    count, side = image_count(spec), spec.get("image_size")
    return None if count is None or not side else float(count * side * side * 3)


def decode_image(body: bytes, size: int | None = None) -> Any:
    """An uploaded image's bytes as uint8 HxWx3 (RGB), resized to `size` x `size`
    (`fit_image`): ValueError for a body over MAX_UPLOAD_BYTES, an image over MAX_PIXELS (read
    from its header, before it is decoded), or bytes that are no image Pillow reads."""
    from PIL import Image, UnidentifiedImageError

    if len(body) > MAX_UPLOAD_BYTES:
        raise ValueError(f"the image is {size_text(len(body))}; at most "
                         f"{size_text(MAX_UPLOAD_BYTES)} is taken")
    try:
        with warnings.catch_warnings():   # Pillow warns of a bomb past 89M pixels: refused here
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(body))
        with opened:
            return fit_image(opened, size)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError) as exc:
        raise ValueError(f"the body is not an image Pillow can read ({exc})") from None


def fit_image(image: Any, size: int | None = None) -> Any:
    """A Pillow image as uint8 HxWx3 (RGB), resized to `size` x `size` as `read_images` resizes
    (bilinear, then converted), so a model sees an upload as it saw its training images;
    ValueError for one over MAX_PIXELS."""
    import numpy as np
    from PIL import Image

    width, height = image.size
    if width * height > MAX_PIXELS:
        raise ValueError(f"the image is {width}x{height} pixels; at most "
                         f"{MAX_PIXELS // 1024 // 1024}M pixels are taken")
    if size and image.size != (size, size):
        image = image.resize((size, size), resample=Image.Resampling.BILINEAR)
    if image.mode != "RGB":
        image = image.convert("RGB")
    return np.asarray(image, dtype=np.uint8)
