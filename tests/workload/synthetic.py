"""Small synthetic data in the real formats: CIFAR-10-style image parquet, a folder of PNG class
folders, breast-cancer CSV."""
from __future__ import annotations

from pathlib import Path


def write_image_parquet(folder: Path, rows: int, seed: int = 0, classes: int = 10, files: int = 2) -> Path:
    """`image`: uint8 32x32x3 (Ray's tensor column, as in the public CIFAR-10 parquet), `label`: int.

    Each class has its own mean colour, so a model can learn something in one epoch.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ray.data._internal.tensor_extensions.arrow import ArrowTensorArray  # as Ray Data writes it

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, rows)
    palette = np.random.default_rng(1234).integers(30, 225, (classes, 1, 1, 3))  # same every split
    noise = rng.normal(0, 25, (rows, 32, 32, 3))
    images = np.clip(palette[labels] + noise, 0, 255).astype(np.uint8)
    folder.mkdir(parents=True, exist_ok=True)
    for part, index in enumerate(np.array_split(np.arange(rows), files)):
        table = pa.table({"image": ArrowTensorArray.from_numpy(images[index]),
                          "label": pa.array(labels[index], pa.int64())})
        pq.write_table(table, folder / f"part-{part}.parquet")
    return folder


def write_image_folder(root: Path, classes: list[str], per_class: int, size: int = 24,
                       seed: int = 0) -> list[Path]:
    """`root/<class>/<n>.png`: `per_class` RGB PNGs of `size` x `size` pixels per class, each
    class its own mean colour (as `write_image_parquet`); returns the files written. Some are
    written in another size and mode (grey, RGBA), which the reader resizes and converts."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    palette = np.random.default_rng(1234).integers(30, 225, (len(classes), 1, 1, 3))
    written = []
    for index, name in enumerate(sorted(classes)):
        (root / name).mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            side = size + 8 * (n % 2)   # every other image larger: resized when read
            pixels = np.clip(palette[index] + rng.normal(0, 25, (side, side, 3)), 0, 255)
            image = Image.fromarray(pixels.astype(np.uint8), "RGB")
            if n % 3 == 2:
                image = image.convert("RGBA")
            path = root / name / f"{n:03d}.png"
            image.save(path)
            written.append(path)
    return written


def write_breast_cancer_csv(path: Path, rows: int | None = None) -> Path:
    """scikit-learn's copy of the breast cancer Wisconsin table, label column `target`."""
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    if rows:
        frame = frame.head(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path
