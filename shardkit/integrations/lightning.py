"""PyTorch Lightning integration: :class:`ShardDataModule` (needs ``pip install 'shardkit[lightning]'``).

::

    dm = ShardDataModule(train="s3://bucket/ds/train", val="s3://bucket/ds/val", batch_size=256, num_workers=8,
                         gpu_augment=GpuAugment.imagenet_train(224), val_gpu_augment=GpuAugment([Normalize(...)]))
    trainer = Trainer(strategy="ddp", devices=8, callbacks=[ModelCheckpoint(every_n_train_steps=1000)])
    trainer.fit(model, datamodule=dm, ckpt_path="last")   # resumes mid-epoch, batch for batch

The DataModule is a ``lightning.pytorch`` one when ``lightning`` is installed, else a
``pytorch_lightning`` one: use the ``Trainer`` of the same package.

How the seams are closed (Lightning 2.x):

* **No sampler over shardkit's split.** Lightning injects a ``DistributedSampler`` only into
  ``torch.utils.data.DataLoader`` objects; the loaders returned here are not ``DataLoader`` s,
  so whatever ``use_distributed_sampler`` says, each rank reads its own shardkit slice (rank and
  world size are taken from the Trainer when the loaders are built).
* **Epochs.** Lightning stops iterating a sized loader after ``len()`` batches, without the
  extra ``next()`` that ends a shardkit pass, and never calls the loader's ``set_epoch``. It reads
  ``len()`` only when it loads a dataloader, so the DataModule sets the Trainer's
  ``reload_dataloaders_every_n_epochs`` to 1 when it is 0 (epochs of a mixture with a fractional
  ``repeat`` differ by a batch; reloading returns the same loader, and ``len()`` is the Trainer's
  epoch's). Every
  training pass therefore starts with ``set_epoch(trainer.current_epoch)`` (the current epoch
  keeps a restored position), and every evaluation pass starts from the beginning of the same
  evaluation epoch (a sanity check that read two batches does not shorten the next validation).
* **Mid-epoch resume.** Lightning does not read ahead of a loader that has a length, so the
  loader's position at a checkpoint is the number of training steps of the epoch. The position is
  saved twice in Lightning's checkpoint, by Lightning itself (≥ 2.2 saves the state of training
  loaders that have ``state_dict``) and by the DataModule's ``state_dict``; the DataModule's
  copy restores loaders that Lightning built before restoring its own (e.g. when
  ``configure_optimizers`` asks for ``trainer.estimated_stepping_batches``,
  Lightning-AI/pytorch-lightning#20550). Both copies are the same state; loading it twice is
  harmless.
* **Workers stop** at the end of ``fit``/``validate`` and when the run raises (``teardown`` and
  ``on_exception``), so a cancelled run leaves no worker behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Optional

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ImportError:
        raise ImportError(
            "shardkit.integrations.lightning needs PyTorch Lightning: pip install 'shardkit[lightning]' (or install pytorch_lightning)"
        ) from None

from shardkit import ShardLoader, load  # the public names (served lazily by shardkit/__init__.py)

__all__ = ["ShardDataModule", "TrainerLoader"]


class TrainerLoader:
    """A :class:`~shardkit.ShardLoader` as a Lightning ``Trainer`` iterates it.

    Args:
        loader: the shardkit loader (``.loader`` keeps it, for ``stats`` or ``epoch_info``).
        epoch: for training: returns the Trainer's current epoch, set on the loader when a pass
            starts. ``None`` (evaluation): every pass replays the loader's state at construction,
            from the first batch.

    ``len()``, ``state_dict()`` and ``load_state_dict()`` are the loader's.
    """

    def __init__(self, loader: ShardLoader, epoch: Optional[Callable[[], int]] = None):
        self.loader = loader
        self._epoch = epoch
        self._start = None if epoch is not None else loader.state_dict()

    def __len__(self) -> int:
        # the whole epoch Lightning is about to iterate: the Trainer's (training), the replayed one (evaluation)
        return self.loader.num_batches(self._epoch() if self._epoch is not None else self._start["epoch"])  # type: ignore[index]

    def __iter__(self) -> Iterator[Any]:
        # a generator: the epoch is read when Lightning asks for the first batch, not when it
        # creates the iterator (with trainer.estimated_stepping_batches in configure_optimizers
        # that is before the checkpoint's epoch is restored: set_epoch(0) would drop the position)
        if self._epoch is None:
            self.loader.load_state_dict(self._start)  # type: ignore[arg-type]  # set whenever _epoch is None
        else:
            self.loader.set_epoch(self._epoch())
        yield from self.loader

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        """Stop the loader's worker processes (the position is kept)."""
        self.loader.close()


class ShardDataModule(pl.LightningDataModule):
    """A ``LightningDataModule`` streaming shardkit datasets.

    Args:
        train: URL of the training split (a directory holding ``manifest.json``).
        val: URL of the validation split, or ``None``.
        gpu_augment: applied on the device to training batches (``on_after_batch_transfer``), e.g.
            a :class:`~shardkit.augment.GpuAugment`; one that mixes labels (MixUp, CutMix) is called
            with ``(images, labels)``. A ``GpuAugment`` is reseeded with its seed + the global rank
            when the loaders are built, so that ranks draw different parameters.
        val_gpu_augment: the same for validation batches (usually just ``Normalize``).
        val_options: :func:`shardkit.load` options for the validation loader only (e.g. ``batch_size``).
        **load_options: :func:`shardkit.load` options for both loaders (``batch_size``,
            ``num_workers``, ``size``, ``seed``, ``with_keys``...). The training loader uses the
            ``train`` preset, shuffled; the validation loader the ``eval`` preset, not shuffled, no
            ``drop_last``. ``rank`` and ``world_size`` come from the Trainer.

    Batches are ``(images uint8 [B,3,S,S], labels int64 [B])`` (plus ``keys`` with
    ``with_keys=True``), or what the augmentation makes of them; with ``fields=(...)`` among the options,
    dicts of those fields (the augmentation gets ``batch["image"]``, and ``"label"`` or ``"labels"`` when it
    mixes labels), which Lightning moves to the device field by field.
    """

    def __init__(
        self,
        train: str,
        val: Optional[str] = None,
        *,
        gpu_augment: Optional[Callable[..., Any]] = None,
        val_gpu_augment: Optional[Callable[..., Any]] = None,
        val_options: Optional[dict[str, Any]] = None,
        **load_options: Any,
    ):
        super().__init__()
        for name in ("rank", "world_size"):
            if name in load_options:
                raise TypeError(f"ShardDataModule takes {name} from the Trainer; remove {name}= from its options")
        self.train_url, self.val_url = train, val
        self.gpu_augment, self.val_gpu_augment = gpu_augment, val_gpu_augment
        self._augment_seed: Optional[int] = getattr(gpu_augment, "seed", None)  # rank 0's; rank r draws from + r
        self.train_options = {"preset": "train", "shuffle": True, **load_options}
        self.val_options = {
            **load_options,
            "preset": "eval",
            "shuffle": False,
            "drop_last": False,
            **(val_options or {}),
        }
        self._train: Optional[TrainerLoader] = None
        self._val: Optional[TrainerLoader] = None
        self._topology: Optional[tuple[Optional[int], Optional[int]]] = (
            None  # (rank, world size) the loaders were built for
        )
        self._restored: Optional[dict[str, Any]] = None  # train state from a checkpoint, for a loader not built yet

    # ------------------------------------------------------------------ loaders

    def _trainer_topology(self) -> tuple[Optional[int], Optional[int]]:
        trainer = self._trainer_or_none()
        return (None, None) if trainer is None else (trainer.global_rank, trainer.world_size)

    def _trainer_or_none(self) -> Any:
        return getattr(self, "trainer", None)  # None outside a Trainer

    def _current_epoch(self) -> int:
        trainer = self._trainer_or_none()
        return trainer.current_epoch if trainer is not None else self._train.loader.epoch  # type: ignore[union-attr]

    def _ensure_topology(self) -> tuple[Optional[int], Optional[int]]:
        """Rebuild the loaders if the Trainer's ranks changed (the train position carries over, re-planned)."""
        rank, world = self._trainer_topology()
        if self._topology is not None and self._topology != (rank, world):
            if self._train is not None and self._restored is None:
                self._restored = self._train.state_dict()
            self.close()
            self._train = self._val = None
        self._topology = (rank, world)
        return rank, world

    def train_dataloader(self) -> TrainerLoader:
        """The training loader (built once per topology; Lightning may ask again)."""
        rank, world = self._ensure_topology()
        trainer = self._trainer_or_none()
        if trainer is not None and not getattr(trainer, "reload_dataloaders_every_n_epochs", 1):
            # Lightning reads len() when it loads a dataloader and stops each epoch there: epochs of
            # different lengths (a mixture's fractional repeat) need len() read again every epoch
            trainer.reload_dataloaders_every_n_epochs = 1
        if self._train is None:
            self._train = TrainerLoader(
                load(self.train_url, rank=rank, world_size=world, **self.train_options), self._current_epoch
            )
            if self._augment_seed is not None and hasattr(self.gpu_augment, "manual_seed"):
                self.gpu_augment.manual_seed(self._augment_seed + (rank or 0))  # type: ignore[union-attr]
        if self._restored is not None:
            self._train.load_state_dict(self._restored)
            self._restored = None
        return self._train

    def val_dataloader(self) -> Any:
        """The validation loader (every pass is the whole split, in manifest order); ``[]`` without ``val``."""
        if self.val_url is None:
            return []
        rank, world = self._ensure_topology()
        if self._val is None:
            self._val = TrainerLoader(load(self.val_url, rank=rank, world_size=world, **self.val_options))
        return self._val

    # ------------------------------------------------------------------ device-side augmentation

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        trainer = self._trainer_or_none()
        aug = self.gpu_augment if trainer is not None and trainer.training else self.val_gpu_augment
        if aug is None:
            return batch
        if isinstance(batch, dict):  # fields=: the augmentation gets the image (and the class labels)
            out = dict(batch)
            if getattr(aug, "needs_labels", False):
                name = "label" if "label" in batch else "labels"
                out["image"], out[name] = aug(batch["image"], batch[name])
            else:
                out["image"] = aug(batch["image"])
            return out
        images, labels, *rest = batch
        if getattr(aug, "needs_labels", False):
            images, labels = aug(images, labels)
        else:
            images = aug(images)
        return (images, labels, *rest)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """``{"train": loader state}`` (the position of the training epoch), ``{}`` before any loader."""
        if self._train is not None:
            return {"train": self._train.state_dict()}
        return {"train": self._restored} if self._restored is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the training position (now, or when the training loader is built)."""
        train = state_dict.get("train")
        if train is None:
            return
        if self._train is not None:
            self._train.load_state_dict(train)
        else:
            self._restored = train

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        """Stop the worker processes of both loaders (they start again on the next pass)."""
        for loader in (self._train, self._val):
            if loader is not None:
                loader.close()

    def teardown(self, stage: str) -> None:
        self.close()

    def on_exception(self, exception: BaseException) -> None:
        self.close()
