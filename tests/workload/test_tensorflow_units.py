"""The tensorflow trainer's job side without Ray: the built-in models in Keras take what the
data gives them (float32 feature vectors; uint8 HxWxC images, normalised as torch's are), a
saved checkpoint answers as `predict` reads it, and TensorFlow's logging is quiet in every
process of a job."""
from __future__ import annotations

import json

import numpy as np
import pytest

from orchestrator.workload import worker
from orchestrator.workload.trainers import tensorflow as trainer

# Keras (TensorFlow: about 8 s to import on the 2-core machine) is imported by the tests that use
# it, not when the fast tier's workers collect this file; the file's tests share one worker.
pytestmark = pytest.mark.xdist_group("keras")


@pytest.fixture
def keras():
    return pytest.importorskip("keras")


def test_the_mlp_takes_the_feature_vector(keras):
    model = trainer.build_model({"name": "mlp", "args": {"hidden_dims": [8, 4]}}, 5)
    assert model.input_shape == (None, 5) and model.output_shape == (None, 2)  # mlp's default


def test_the_cnn_normalises_uint8_images_as_the_torch_models_take_them(keras):
    model = trainer.build_model({"name": "cnn", "args": {"image_size": 8, "channels": 1,
                                                         "width": 4, "num_classes": 3}}, None)
    assert model.input_shape == (None, 8, 8, 1) and model.output_shape == (None, 3)
    rescale = model.layers[1]
    pixels = np.array([[0.0, 127.5, 255.0]], dtype=np.float32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(rescale(pixels)), [[-1.0, 0.0, 1.0]])


def test_a_saved_checkpoint_answers_probabilities(tmp_path, keras):
    model = trainer.build_model({"name": "mlp", "args": {"hidden_dims": [4]}}, 2)
    model.save(tmp_path / trainer.CHECKPOINT_FILE)
    (tmp_path / ".metadata.json").write_text(json.dumps({"_model_filename": "model.keras"}))
    card = {"image": False, "features": ["a", "b"], "class_names": [0, 1]}
    scores = trainer.load(str(tmp_path), card, use_gpu=False)
    answer = scores({"a": np.array([0.5, -1.0]), "b": np.array([2.0, 0.0])})
    assert answer.shape == (2, 2)
    np.testing.assert_allclose(answer.sum(axis=1), 1.0, rtol=1e-6)
    logits = model(np.array([[0.5, 2.0], [-1.0, 0.0]], dtype=np.float32))
    np.testing.assert_allclose(answer, keras.ops.convert_to_numpy(keras.ops.softmax(logits)),
                               rtol=1e-6)


def test_tensorflow_is_quiet_in_every_process_unless_the_user_says(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    worker.framework_environment()
    import os

    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    worker.framework_environment()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"
