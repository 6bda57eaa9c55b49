"""Options and results of ``shardkit demo`` (no torch import: the CLI reads the defaults at start-up)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DemoConfig:
    """Size of the demo run (defaults finish in about a minute on 2 cores)."""

    workdir: str = "shardkit-demo"
    num_classes: int = 4
    train_per_class: int = 160
    val_per_class: int = 40
    image_size: int = 64
    batch_size: int = 32
    epochs: int = 4
    num_workers: int = 2
    seed: int = 0
    device: str = ""  # "" = cuda if available, else cpu


@dataclass
class EpochLog:
    epoch: int
    loss: float
    train_acc: float
    val_acc: float
    images_per_s: float


@dataclass
class DemoResult:
    epochs: list[EpochLog] = field(default_factory=list)
    shardkit_images_per_s: float = 0.0
    imagefolder_images_per_s: float = 0.0
    convert_seconds: float = 0.0
    device: str = "cpu"
