"""The built-in models, in plain PyTorch (torchvision does not import with the CPU torch here).

`VisionTransformer` takes torchvision's arguments and uses its module and parameter names, so a
state dict moves between the two.
"""
from __future__ import annotations


def build_model(model: dict, input_dim: int | None = None):
    """`model` is the config's `{name, args}`; `input_dim` is the feature count for tabular data."""
    builders = {"vit": _vit, "mlp": _mlp, "cnn": _cnn}
    name = model.get("name")
    if name not in builders:
        raise ValueError(f"unknown model {name!r}; built-in models: {', '.join(builders)}")
    return builders[name](dict(model.get("args") or {}), input_dim)


def is_image_model(model: dict | None) -> bool:
    return bool(model) and model.get("name") in ("vit", "cnn")


def _vit(args: dict, _input_dim):
    return _classes()["VisionTransformer"](**args)


def _cnn(args: dict, _input_dim):
    return _classes()["SmallCNN"](**args)


def _mlp(args: dict, input_dim):
    if input_dim is None:
        raise ValueError("the mlp model needs tabular features")
    return _classes()["MLP"](input_dim=input_dim, **args)


_CACHE: dict = {}


def _classes() -> dict:
    """Define the torch classes on first use, so importing this module does not import torch."""
    if _CACHE:
        return _CACHE
    from collections import OrderedDict

    import torch
    from torch import nn

    class MLPBlock(nn.Sequential):
        def __init__(self, in_dim, mlp_dim, dropout):
            super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
                             nn.Linear(mlp_dim, in_dim), nn.Dropout(dropout))

    class EncoderBlock(nn.Module):
        def __init__(self, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout):
            super().__init__()
            self.ln_1 = nn.LayerNorm(hidden_dim, eps=1e-6)
            self.self_attention = nn.MultiheadAttention(
                hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
            self.dropout = nn.Dropout(dropout)
            self.ln_2 = nn.LayerNorm(hidden_dim, eps=1e-6)
            self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

        def forward(self, x):
            y = self.ln_1(x)
            y, _ = self.self_attention(y, y, y, need_weights=False)
            x = x + self.dropout(y)
            return x + self.mlp(self.ln_2(x))

    class Encoder(nn.Module):
        def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout,
                     attention_dropout):
            super().__init__()
            self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
            self.dropout = nn.Dropout(dropout)
            self.layers = nn.Sequential(OrderedDict(
                (f"encoder_layer_{i}",
                 EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout))
                for i in range(num_layers)))
            self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)

        def forward(self, x):
            return self.ln(self.layers(self.dropout(x + self.pos_embedding)))

    class VisionTransformer(nn.Module):
        """torchvision.models.VisionTransformer, same arguments and parameter names."""

        def __init__(self, image_size=224, patch_size=16, num_layers=12, num_heads=12,
                     hidden_dim=768, mlp_dim=3072, dropout=0.0, attention_dropout=0.0,
                     num_classes=1000, representation_size=None, channels=3):
            super().__init__()
            if image_size % patch_size:
                raise ValueError("image_size must be divisible by patch_size")
            self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
            self.conv_proj = nn.Conv2d(channels, hidden_dim, kernel_size=patch_size, stride=patch_size)
            seq_length = (image_size // patch_size) ** 2 + 1
            self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
            self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim,
                                   dropout, attention_dropout)
            heads = {}
            if representation_size is None:
                heads["head"] = nn.Linear(hidden_dim, num_classes)
            else:
                heads["pre_logits"] = nn.Linear(hidden_dim, representation_size)
                heads["act"] = nn.Tanh()
                heads["head"] = nn.Linear(representation_size, num_classes)
            self.heads = nn.Sequential(OrderedDict(heads))
            nn.init.zeros_(self.heads.head.weight)
            nn.init.zeros_(self.heads.head.bias)

        def forward(self, x):
            n = x.shape[0]
            x = self.conv_proj(x).reshape(n, self.hidden_dim, -1).permute(0, 2, 1)
            x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
            return self.heads(self.encoder(x)[:, 0])

    class MLP(nn.Module):
        def __init__(self, input_dim, hidden_dims=(64, 64), num_classes=2, dropout=0.0):
            super().__init__()
            layers, width = [], input_dim
            for size in hidden_dims:
                layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
                width = size
            layers.append(nn.Linear(width, num_classes))
            self.net = nn.Sequential(*layers)

        def forward(self, x):
            return self.net(x)

    class SmallCNN(nn.Module):
        def __init__(self, num_classes=10, channels=3, image_size=32, width=32):
            super().__init__()
            layers, current = [], channels
            for size in (width, 2 * width):  # two conv + pool stages
                layers += [nn.Conv2d(current, size, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
                current = size
            side = image_size // 4
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(current * side * side, 128),
                                            nn.ReLU(), nn.Linear(128, num_classes))

        def forward(self, x):
            return self.classifier(self.features(x))

    _CACHE.update(VisionTransformer=VisionTransformer, MLP=MLP, SmallCNN=SmallCNN)
    return _CACHE
