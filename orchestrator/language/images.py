"""The checks of `format: images` datasets before a job reads them (`workload.images` reads
them): a model that takes images, a train split of images too, and a path that is a folder of
class folders or a .csv/.parquet listing of `path,label`; for local folders, images in class
folders, a validation split without classes the train split lacks, and a `num_classes` that
matches the class folders.

    problems(doc, data, base) -> list[Problem]     `data`: the experiment, `base`: its folder
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import Problem
from ..util.uris import is_uri
from ..yamlload import Document, FieldPath
from .paths import holds, local

IMAGES = "images"
LOOKED_AT = 2000   # a folder's first files looked at: a wrong layout shows in the first ones


def problems(doc: Document, data: dict[str, Any], base: Path) -> list[Problem]:
    from ..workload.models import is_image_model

    datasets = data.get("datasets") or {}
    named = [name for name, d in datasets.items() if d.get("format") == IMAGES]
    if not named:
        return []
    found: list[Problem] = []
    model = data.get("model")
    if "train_loop" not in data and not (isinstance(model, dict) and is_image_model(
            {"name": model.get("name", ""), "args": {}})):
        has = f"model {model['name']}" if isinstance(model, dict) and model.get("name") \
            else f"trainer {data['trainer']} without a model"
        found.append(doc.problem(("datasets", named[0], "format"), f"format: images needs a "
                                 f"model that takes images, and this experiment has {has}",
                                 "use model: {name: vit} or {name: cnn} with trainer: torch, "
                                 "or your own train_loop"))
    if "train" in datasets and "train" not in named:
        found.append(doc.problem(("datasets", "train", "format"), f"datasets.{named[0]} is "
                                 "format: images, so train must be too: the class names "
                                 "come from the train split"))
    classes: dict[str, list[str]] = {}   # split -> the class folders of a local folder
    for name in named:
        path = str(datasets[name]["path"])
        where = local(base, path)
        field: FieldPath = ("datasets", name, "path")
        if is_uri(path) or not holds(where):
            continue
        if holds(where, Path.is_dir):
            problem = _folder_problem(doc, field, path, where)
            if problem is None:
                classes[name] = class_folders(where)
            else:
                found.append(problem)
        else:
            found += _listing_problems(doc, field, path, where, data.get("label_column"))
    return found + _class_problems(doc, data, classes)


def _listing_problems(doc: Document, field: FieldPath, path: str, where: Path,
                      label: str | None) -> list[Problem]:
    """A file that is no .csv/.parquet listing, or a listing without its columns."""
    from ..workload.images import listing_format
    from .columns import columns

    said = listing_format(path)
    if said is None:
        return [doc.problem(field, f"format: images reads a folder of class folders "
                            f"(train/cat/001.png) or a .csv/.parquet listing of path,label; "
                            f"'{path}' is a file and neither",
                            "name the folder that holds the class folders")]
    header = columns(where, said, None)
    label = label or "label"
    lacking = [c for c in ("path", label) if header is not None and c not in header]
    if not lacking:
        return []
    return [doc.problem(field, f"the image listing '{path}' has no column "
                        f"{', '.join(map(repr, lacking))} (it has: {', '.join(header or [])})",
                        f"a listing has a 'path' column (relative to its folder) and '{label}'")]


def _is_image(parts: tuple[str, ...]) -> bool:
    """A file `read_images` reads: an image suffix, no name starting with "." or "_" (Ray Data
    skips those)."""
    from ..workload.images import EXTENSIONS

    return Path(parts[-1]).suffix.lower().lstrip(".") in EXTENSIONS and \
        not any(p.startswith((".", "_")) for p in parts)


def _folder_problem(doc: Document, field: FieldPath, path: str, folder: Path) -> Problem | None:
    """A local folder whose first images are not each in a class folder, or that has none."""
    seen = 0
    for file in folder.rglob("*"):
        inside = file.relative_to(folder).parts
        if not _is_image(inside):
            continue
        if len(inside) != 2:
            return doc.problem(field, f"'{path}/{'/'.join(inside)}' is not in a class folder: "
                               "a folder of images holds one folder per class, named after it, "
                               "with the class's images directly inside (train/cat/001.png)",
                               "move the images into class folders, or list them in a CSV "
                               "with columns path,label")
        seen += 1
        if seen >= LOOKED_AT:
            return None
    if seen:
        return None
    from ..workload.images import EXTENSIONS

    return doc.problem(field, f"'{path}' holds no image files ({', '.join(EXTENSIONS)}) in class "
                       "folders")


def class_folders(folder: Path) -> list[str]:
    """The classes of a local folder, sorted: its folders that hold an image."""
    try:
        return sorted(d.name for d in folder.iterdir() if d.is_dir() and any(
            f.is_file() and _is_image((d.name, f.name)) for f in d.iterdir()))
    except OSError:
        return []


def _class_problems(doc: Document, data: dict[str, Any],
                    classes: dict[str, list[str]]) -> list[Problem]:
    """A split with classes the train split lacks; a `num_classes` that is not the number of
    the train split's classes (local folders only)."""
    train = classes.get("train")
    if not train:
        return []
    found = []
    for name, names in classes.items():
        extra = sorted(set(names) - set(train))
        if extra:
            found.append(doc.problem(("datasets", name, "path"), f"class folder(s) "
                                     f"{', '.join(map(repr, extra[:10]))} that datasets.train "
                                     f"lacks (it has: {', '.join(train[:20])}); a model learns "
                                     "only the train split's classes"))
    model = data.get("model")
    given = model.get("num_classes") if isinstance(model, dict) else None
    if isinstance(given, int) and given != len(train):
        found.append(doc.problem(("model", "num_classes"), f"num_classes is {given}, but "
                                 f"datasets.train has {len(train)} class folders "
                                 f"({', '.join(train[:20])})", "leave num_classes out: it is then "
                                 "the number of class folders"))
    return found
