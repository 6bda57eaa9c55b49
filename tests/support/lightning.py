"""A Lightning ``Trainer`` for the tests: one CPU device, no logger, checkpoints, progress bar or model summary."""

from __future__ import annotations

from typing import Any


def cpu_trainer(**kw: Any) -> Any:
    """A ``lightning.pytorch.Trainer`` on one CPU device with nothing written or printed; ``kw`` adds to or
    overrides its arguments (e.g. ``max_epochs``, ``enable_checkpointing=True``, ``callbacks``)."""
    import lightning.pytorch as pl

    base: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return pl.Trainer(**{**base, **kw})
