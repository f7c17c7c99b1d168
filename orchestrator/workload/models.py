"""The built-in models, in plain PyTorch (torchvision does not import with the CPU torch here).

`VisionTransformer` takes torchvision's arguments and uses its module and parameter names, so a
state dict moves between the two.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..contract import ModelSection


def build_model(model: ModelSection, input_dim: int | None = None) -> Any:
    """`model` is the config's `{name, args}`; `input_dim` is the feature count for tabular data."""
    name = model.get("name")
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; built-in models: {', '.join(MODELS)}")
    return MODELS[name].build(dict(model.get("args") or {}), input_dim)


def is_image_model(model: ModelSection | None) -> bool:
    return bool(model and model.get("name") in MODELS and MODELS[model["name"]].image)


def image_size(model: ModelSection | None) -> int | None:
    """The side (pixels) a built-in image model takes its square images at: its `image_size`
    argument, else its default; None for a tabular model or none."""
    if not is_image_model(model):
        return None
    assert model is not None
    size = (model.get("args") or {}).get("image_size") or MODELS[model["name"]].image_size
    return None if size is None else int(size)


def default_classes(name: str) -> int:
    """The model's `num_classes` when its args give none (2 for an unknown name)."""
    return MODELS[name].classes if name in MODELS else 2


def _vit(args: dict[str, Any], _input_dim: int | None) -> Any:
    return _classes()["VisionTransformer"](**args)


def _cnn(args: dict[str, Any], _input_dim: int | None) -> Any:
    return _classes()["SmallCNN"](**args)


def _mlp(args: dict[str, Any], input_dim: int | None) -> Any:
    if input_dim is None:
        raise ValueError("the mlp model needs tabular features")
    return _classes()["MLP"](input_dim=input_dim, **args)


@dataclass(frozen=True)
class BuiltIn:
    """A built-in model: the arguments `model:` may give it (the experiment schema and the
    torch trainer's checks read them here), its `num_classes` default, whether it takes
    images (and at which `image_size` by default), and how it is built."""
    args: tuple[str, ...]
    classes: int
    image: bool
    build: Callable[[dict[str, Any], int | None], Any]
    image_size: int | None = None


# The one table of built-in models (`model.name`).
MODELS: dict[str, BuiltIn] = {
    "vit": BuiltIn(("image_size", "patch_size", "num_layers", "num_heads", "hidden_dim",
                    "mlp_dim", "num_classes", "dropout", "attention_dropout", "channels"),
                   1000, True, _vit, 224),
    "mlp": BuiltIn(("hidden_dims", "num_classes", "dropout"), 2, False, _mlp),
    "cnn": BuiltIn(("image_size", "channels", "num_classes", "width"), 10, True, _cnn, 32),
}


_CACHE: dict[str, type[Any]] = {}  # name -> torch.nn.Module subclass


def _classes() -> dict[str, type[Any]]:
    """Define the torch classes on first use, so importing this module does not import torch."""
    if _CACHE:
        return _CACHE
    from collections import OrderedDict

    import torch
    from torch import nn

    class MLPBlock(nn.Sequential):
        def __init__(self, in_dim: int, mlp_dim: int, dropout: float) -> None:
            super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
                             nn.Linear(mlp_dim, in_dim), nn.Dropout(dropout))

    class EncoderBlock(nn.Module):
        def __init__(self, num_heads: int, hidden_dim: int, mlp_dim: int, dropout: float,
                     attention_dropout: float) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(hidden_dim, eps=1e-6)
            self.self_attention = nn.MultiheadAttention(
                hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
            self.dropout = nn.Dropout(dropout)
            self.ln_2 = nn.LayerNorm(hidden_dim, eps=1e-6)
            self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

        def forward(self, x: torch.Tensor) -> Any:
            y = self.ln_1(x)
            y, _ = self.self_attention(y, y, y, need_weights=False)
            x = x + self.dropout(y)
            return x + self.mlp(self.ln_2(x))

    class Encoder(nn.Module):
        def __init__(self, seq_length: int, num_layers: int, num_heads: int, hidden_dim: int,
                     mlp_dim: int, dropout: float, attention_dropout: float) -> None:
            super().__init__()
            self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
            self.dropout = nn.Dropout(dropout)
            self.layers = nn.Sequential(OrderedDict(
                (f"encoder_layer_{i}",
                 EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout))
                for i in range(num_layers)))
            self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)

        def forward(self, x: torch.Tensor) -> Any:
            return self.ln(self.layers(self.dropout(x + self.pos_embedding)))

    class VisionTransformer(nn.Module):
        """torchvision.models.VisionTransformer, same arguments and parameter names."""

        def __init__(self, image_size: int = 224, patch_size: int = 16, num_layers: int = 12,
                     num_heads: int = 12, hidden_dim: int = 768, mlp_dim: int = 3072,
                     dropout: float = 0.0, attention_dropout: float = 0.0, num_classes: int = 1000,
                     representation_size: int | None = None, channels: int = 3) -> None:
            super().__init__()
            if image_size % patch_size:
                raise ValueError("image_size must be divisible by patch_size")
            self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
            self.conv_proj = nn.Conv2d(channels, hidden_dim, kernel_size=patch_size, stride=patch_size)
            seq_length = (image_size // patch_size) ** 2 + 1
            self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
            self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim,
                                   dropout, attention_dropout)
            heads: dict[str, nn.Module] = {}
            if representation_size is None:
                heads["head"] = nn.Linear(hidden_dim, num_classes)
            else:
                heads["pre_logits"] = nn.Linear(hidden_dim, representation_size)
                heads["act"] = nn.Tanh()
                heads["head"] = nn.Linear(representation_size, num_classes)
            self.heads = nn.Sequential(OrderedDict(heads))
            head = cast(nn.Linear, self.heads.head)  # Module.__getattr__ says Tensor | Module
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

        def forward(self, x: torch.Tensor) -> Any:
            n = x.shape[0]
            x = self.conv_proj(x).reshape(n, self.hidden_dim, -1).permute(0, 2, 1)
            x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
            return self.heads(self.encoder(x)[:, 0])

    class MLP(nn.Module):
        def __init__(self, input_dim: int, hidden_dims: Sequence[int] = (64, 64), num_classes: int = 2,
                     dropout: float = 0.0) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            width = input_dim
            for size in hidden_dims:
                layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
                width = size
            layers.append(nn.Linear(width, num_classes))
            self.net = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> Any:
            return self.net(x)

    class SmallCNN(nn.Module):
        def __init__(self, num_classes: int = 10, channels: int = 3, image_size: int = 32,
                     width: int = 32) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            current = channels
            for size in (width, 2 * width):  # two conv + pool stages
                layers += [nn.Conv2d(current, size, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
                current = size
            side = image_size // 4
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(current * side * side, 128),
                                            nn.ReLU(), nn.Linear(128, num_classes))

        def forward(self, x: torch.Tensor) -> Any:
            return self.classifier(self.features(x))

    _CACHE.update(VisionTransformer=VisionTransformer, MLP=MLP, SmallCNN=SmallCNN)
    return _CACHE
