"""A predict request's body as the rows the model takes (`serving`'s `/predict`, the demo page):
JSON rows, or one uploaded image for an image model.

    rows_of(body)                   parsed JSON (records or columns) -> a DataFrame
    is_image_upload(headers)        the body is an image (`Content-Type: image/...`)
    image_rows(image, card)         an image (bytes, HxWxC array, Pillow) -> the model's one row
    request_rows(request, card)     a Starlette request's body, either kind -> a DataFrame
    answer(headers, predictions)    `/predict`'s JSON: the rows, and for an image its top classes

An image is resized to the model card's `image_size` as the training images were
(`images.fit_image`), within `images.MAX_UPLOAD_BYTES` and `images.MAX_PIXELS`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .data import IMAGE
from .images import MAX_UPLOAD_BYTES, decode_image, fit_image
from .inference import PROBABILITY
from .models import image_size

TOP_CLASSES = 5


def rows_of(body: Any) -> Any:
    """The request body as a DataFrame; ValueError says what shape was expected."""
    import pandas as pd

    if isinstance(body, dict) and len(body) == 1 and next(iter(body)) in ("records", "columns"):
        body = next(iter(body.values()))
    if isinstance(body, list) and all(isinstance(row, dict) for row in body):
        return pd.DataFrame.from_records(body)
    if isinstance(body, dict) and all(isinstance(v, list) for v in body.values()):
        if len({len(v) for v in body.values()}) > 1:
            raise ValueError("every column must have the same number of values")
        return pd.DataFrame(body)
    raise ValueError("expected JSON records ([{column: value}, ...]) or columns "
                     "({column: [values]})")


def is_image_upload(headers: Mapping[str, str]) -> bool:
    """Whether a request's body is an image: its Content-Type is image/png, image/jpeg, ..."""
    kind = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    return kind.startswith("image/")


def image_rows(image: Any, card: Mapping[str, Any]) -> Any:
    """One image as the one-row DataFrame an image model predicts (`inference.Predictor`):
    `image` uint8 HxWx3 at the card's `image_size`. `image`: the file's bytes (an upload), a
    numpy HxW or HxWxC uint8 array (Gradio's `gr.Image(type="numpy")`), or a Pillow image.
    ValueError for a model that takes table rows, bytes that are no image, an image too large."""
    import numpy as np
    import pandas as pd
    from PIL import Image

    if not card.get("image"):
        raise ValueError("this model takes table rows (JSON records or columns), not an image")
    size = card.get("image_size") or image_size(card.get("model"))
    if isinstance(image, (bytes, bytearray, memoryview)):
        pixels = decode_image(bytes(image), size)
    elif isinstance(image, np.ndarray):
        pixels = fit_image(Image.fromarray(image.astype(np.uint8, copy=False)), size)
    elif isinstance(image, Image.Image):
        pixels = fit_image(image, size)
    else:
        raise ValueError(f"expected an image's bytes, an array or a Pillow image, not "
                         f"{type(image).__name__}")
    return pd.DataFrame({IMAGE: [pixels]})


async def request_rows(request: Any, card: Mapping[str, Any]) -> Any:
    """A Starlette request's body as a DataFrame: an uploaded image (read up to
    MAX_UPLOAD_BYTES, no further) or JSON rows; ValueError says what is wrong with it."""
    if not is_image_upload(request.headers):
        return rows_of(await request.json())   # bad JSON: a JSONDecodeError, a ValueError
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_UPLOAD_BYTES:
            raise ValueError(f"the image is larger than {MAX_UPLOAD_BYTES // 1024 // 1024} MiB")
    return image_rows(bytes(body), card)


def top_classes(row: Mapping[str, Any], count: int = TOP_CLASSES) -> list[dict[str, Any]]:
    """A predicted row's most likely classes, most likely first: [{class, confidence}]."""
    scores = [(key[len(PROBABILITY):], float(value)) for key, value in row.items()
              if key.startswith(PROBABILITY)]
    scores.sort(key=lambda pair: -pair[1])
    return [{"class": name, "confidence": value} for name, value in scores[:count]]


def answer(headers: Mapping[str, str], predictions: list[dict[str, Any]]) -> dict[str, Any]:
    """`/predict`'s answer: {"predictions": rows}, and for an uploaded image also "top": its
    most likely classes with their confidences."""
    if is_image_upload(headers) and predictions:
        return {"predictions": predictions, "top": top_classes(predictions[0])}
    return {"predictions": predictions}
