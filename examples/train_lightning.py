"""The cats-vs-dogs densenet121 fine-tune (examples/train_catdog.py) as a LightningModule on shardkit.

``shardkit.integrations.lightning.ShardDataModule`` streams the shards: rank and world size from the
Trainer, crop+flip while decoding, rotation, colour and normalisation on the device, and the
loader's position inside Lightning's checkpoints::

    python examples/train_lightning.py --src path/to/catdog            # an ImageFolder: cat/, dog/ (or train/ val/)
    python examples/train_lightning.py --demo-data --no-pretrained --epochs 1 --image-size 64   # sample data
    python examples/train_lightning.py --shards catdog-shards --devices 2 --strategy ddp        # CPU (gloo) or GPUs
    python examples/train_lightning.py --shards catdog-shards --ckpt-dir ckpt --ckpt-every 20   # killed? then
    python examples/train_lightning.py --shards catdog-shards --ckpt-dir ckpt --ckpt-every 20 --resume ckpt/last.ckpt

The resumed run continues in the middle of the epoch with exactly the batches not yet trained on.

Test hooks (used by tests/integrations/test_lightning.py): ``--arch small`` (a small CNN instead of
densenet121), ``--log-keys DIR`` writes the sample keys of every train and validation step per
rank, ``--exit-after-step N`` ends the process abruptly (``os._exit``, as if killed) once step N
and its checkpoint are done.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from shardkit.augment import IMAGENET_MEAN, IMAGENET_STD, ColorJitter, GpuAugment, Normalize, RandomRotation
from shardkit.convert import ConvertConfig, convert
from shardkit.convert.imageproc import EncodeConfig
from shardkit.format.manifest import load_manifest
from shardkit.integrations.lightning import ShardDataModule

EXIT_CODE = 3  # --exit-after-step


class CatDog(pl.LightningModule):
    """Cross-entropy fine-tune with AdamW and a one-cycle schedule over the whole run."""

    def __init__(self, net: torch.nn.Module, lr: float, log_dir: str = ""):
        super().__init__()
        self.net = net.to(memory_format=torch.channels_last)
        self.lr = lr
        self.log_dir = log_dir
        self._log_file = None

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def _log_keys(self, stage: str, keys: list[str]) -> None:
        if self._log_file is None:
            self._log_file = open(os.path.join(self.log_dir, f"rank{self.global_rank}.jsonl"), "a")
        aug_seed = getattr(self.trainer.datamodule.gpu_augment, "seed", None)  # per rank
        rec = {
            "stage": stage,
            "epoch": self.current_epoch,
            "step": self.global_step,
            "keys": list(keys),
            "aug_seed": aug_seed,
        }
        self._log_file.write(json.dumps(rec) + "\n")
        self._log_file.flush()  # an abrupt exit loses nothing

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        images, labels = batch[0], batch[1]
        if self.log_dir:
            self._log_keys("train", batch[2])
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True, batch_size=len(labels))
        return loss

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        images, labels = batch[0], batch[1]
        if self.log_dir:
            self._log_keys("sanity" if self.trainer.sanity_checking else "val", batch[2])
        acc = (self(images).argmax(1) == labels).float().mean()
        self.log("val_acc", acc, sync_dist=True, batch_size=len(labels))

    def configure_optimizers(self) -> dict:
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr)
        # estimated_stepping_batches builds the train loader early: the DataModule still restores its position
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=self.lr, total_steps=self.trainer.estimated_stepping_batches
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class PrintEpoch(Callback):
    """One line per epoch on rank 0: loss, validation accuracy, loader images/s."""

    def __init__(self) -> None:
        self.t0 = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.t0 = time.perf_counter()

    on_train_start = on_train_epoch_start  # a run resumed mid-epoch does not start the epoch again

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            m = {k: float(v) for k, v in trainer.callback_metrics.items()}
            stats = trainer.train_dataloader.loader.stats  # the TrainerLoader of the DataModule
            print(
                f"epoch {trainer.current_epoch}: loss {m.get('train_loss', float('nan')):.3f} val acc {m.get('val_acc', float('nan')):.3f} "
                f"({stats.samples} samples per rank, {stats.samples / max(1e-9, time.perf_counter() - self.t0):.1f} img/s)",
                flush=True,
            )


class ExitAfterStep(Callback):
    """Test hook: ``os._exit`` at the start of the step after ``step`` (its checkpoint is written by then)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step >= self.step:
            os._exit(EXIT_CODE)


def build_net(arch: str, num_classes: int, pretrained: bool) -> torch.nn.Module:
    if arch == "small":
        from shardkit.demo.run import small_cnn

        return small_cnn(num_classes)
    from train_catdog import build_model  # the same densenet121 with a new head

    return build_model(num_classes, pretrained)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", help="ImageFolder root to convert (class folders, or train/ and val/ split folders)")
    p.add_argument(
        "--demo-data", action="store_true", help="convert a small sample ImageFolder that shardkit makes (2 classes)"
    )
    p.add_argument("--shards", default="catdog-shards", help="converted dataset (train/ and val/ splits, or one split)")
    p.add_argument("--arch", choices=["densenet121", "small"], default="densenet121")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=2, help="loader worker processes per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--devices", default="auto", help="number of processes/devices (Trainer devices=)")
    p.add_argument("--strategy", default="auto", help="e.g. ddp")
    p.add_argument("--ckpt-dir", default="", help="write checkpoints here (last.ckpt + the latest step checkpoint)")
    p.add_argument("--ckpt-every", type=int, default=0, help="also checkpoint every N training steps")
    p.add_argument("--resume", default="", help="checkpoint to continue from (e.g. CKPT_DIR/last.ckpt)")
    p.add_argument(
        "--log-keys", default="", help="test hook: directory for per-rank JSON lines of every step's sample keys"
    )
    p.add_argument(
        "--exit-after-step", type=int, default=0, help="test hook: os._exit once step N and its checkpoint are done"
    )
    args = p.parse_args(argv)

    if args.demo_data:
        from shardkit.demo.sampledata import SMALL, make_imagefolder

        args.src = make_imagefolder("catdog-sample", num_classes=2, spread=SMALL, splits={"train": 64, "val": 16})
    if args.src:  # resumable: re-running skips finished shards
        convert(args.src, args.shards, ConvertConfig(image=EncodeConfig(short_side=max(args.image_size * 8 // 7, 64))))
    split = os.path.join(args.shards, "train")  # every conversion writes SHARDS/<split>/
    train = (
        split if os.path.exists(os.path.join(split, "manifest.json")) else args.shards
    )  # (older shardkit: SHARDS itself)
    val = (
        os.path.join(args.shards, "val") if os.path.exists(os.path.join(args.shards, "val", "manifest.json")) else None
    )
    num_classes = len(load_manifest(train).classes)

    norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    dm = ShardDataModule(
        train,
        val,
        gpu_augment=GpuAugment(
            [RandomRotation(30), ColorJitter(0.2, 0.2, 0.2), norm], memory_format="channels_last", seed=args.seed
        ),
        val_gpu_augment=GpuAugment([norm], memory_format="channels_last"),
        batch_size=args.batch_size,
        size=args.image_size,
        num_workers=args.workers,
        seed=args.seed,
        with_keys=bool(args.log_keys),
    )
    pl.seed_everything(args.seed, verbose=False)
    model = CatDog(build_net(args.arch, num_classes, args.pretrained), args.lr, args.log_keys)

    callbacks: list[Callback] = [PrintEpoch()]
    if args.ckpt_dir:
        callbacks.append(
            ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.ckpt_every or None, save_last=True)
        )
    if args.exit_after_step:
        callbacks.append(ExitAfterStep(args.exit_after_step))
    devices = int(args.devices) if args.devices.isdigit() else args.devices
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices=devices,
        strategy=args.strategy,
        callbacks=callbacks,
        enable_checkpointing=bool(args.ckpt_dir),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=args.resume or None)


if __name__ == "__main__":
    main()
