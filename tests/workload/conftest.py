"""End-to-end fixtures: experiment folders with small synthetic data in the real formats."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .synthetic import write_breast_cancer_csv, write_image_parquet


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_image_parquet(root / "images" / "train", 256, seed=1)
    write_image_parquet(root / "images" / "valid", 64, seed=2, files=1)
    write_breast_cancer_csv(root / "breast_cancer.csv")
    return root


@pytest.fixture
def experiment(tmp_path, data_dir):
    """Write an experiment file next to the data: experiment(name, **document) -> path."""
    link = tmp_path / "data"
    link.symlink_to(data_dir)

    def write(name: str, **document) -> Path:
        # A test's own run_config adds to the storage_path, never replaces it (a run without it
        # would go to Ray's default, ~/ray_results).
        run_config = {"storage_path": str(tmp_path / "results"), **document.pop("run_config", {})}
        document = {"name": name, "run_config": run_config, **document}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    return write


TINY_VIT = {"name": "vit", "image_size": 32, "patch_size": 8, "num_layers": 1, "num_heads": 2,
            "hidden_dim": 32, "mlp_dim": 64, "num_classes": 10}
