"""The schedule of a :class:`~shardkit.augment.GpuAugment` for one input size: which ops fuse into one
resampling pass (a run of consecutive geometric ops), the canvas sizes and fills of each run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shardkit.augment.affine import FillStage
from shardkit.augment.base import GeometricOp, Op, Size


@dataclass(frozen=True)
class GeometricStage:
    """A run of consecutive geometric ops (indices into the ops), resampled once."""

    indices: tuple[int, ...]
    sizes: tuple[Size, ...]  # canvas sizes, input first
    fills: tuple[FillStage, ...]
    crop: tuple[int, int, int, int] | None  # (top, left, height, width) when all ops are fixed crops
    # canvases k > 0 whose outside the image fills and whose region differs from the canvas of the cut before
    # (or the input): there the run's targets are clipped too (shardkit.augment.target_moves)
    cuts: tuple[int, ...] = ()


@dataclass(frozen=True)
class OpStage:
    """One op that is not fused into a geometric run, applied on its own (its index in the ops)."""

    index: int


@dataclass(frozen=True)
class Program:
    """The compiled op sequence for one input size: fused geometric stages and per-op input sizes."""

    stages: tuple[GeometricStage | OpStage, ...]
    op_sizes: tuple[Size, ...]  # size of the image each op receives
    out_size: Size


def build_program(ops: Sequence[Op], size: Size, *, clip_intermediate: bool) -> Program:
    """The program ``ops`` for inputs of ``size``: each run of consecutive geometric ops one stage."""
    op_sizes: list[Size] = []
    stages: list[GeometricStage | OpStage] = []
    run: list[int] = []

    def close_run() -> None:
        if run:
            stages.append(geometric_stage(ops, tuple(run), op_sizes[run[0]], clip_intermediate))
            run.clear()

    for i, op in enumerate(ops):
        op_sizes.append(size)
        if isinstance(op, GeometricOp):
            run.append(i)
            size = op.output_size(size)
        else:
            close_run()
            stages.append(OpStage(i))
    close_run()
    return Program(tuple(stages), tuple(op_sizes), size)


def geometric_stage(ops: Sequence[Op], indices: tuple[int, ...], size: Size, clip_intermediate: bool) -> GeometricStage:
    """One fused run: its canvas sizes, fills, and the integer crop it is when all its ops are fixed crops."""
    sizes = [size]
    crop: tuple[int, int, int, int] | None = (0, 0, *size)
    fills: list[FillStage] = []
    for k, i in enumerate(indices):
        op = ops[i]
        assert isinstance(op, GeometricOp)
        c = op.static_crop(sizes[-1])
        if crop is not None and c is not None:
            crop = (crop[0] + c[0], crop[1] + c[1], c[2], c[3])
        else:
            crop = None
        fill = op.fill_value()
        if fill is not None:
            if clip_intermediate:
                fills.append(FillStage(k, fill))
            elif not fills:
                fills.append(FillStage(0, fill))
        sizes.append(op.output_size(sizes[-1]))
    cuts: list[int] = []
    for f in fills:
        since = indices[cuts[-1] if cuts else 0 : f.canvas]
        if f.canvas > 0 and not all(getattr(ops[i], "whole_canvas", False) for i in since):
            cuts.append(f.canvas)
    return GeometricStage(indices, tuple(sizes), tuple(fills), crop, tuple(cuts))


__all__ = ["GeometricStage", "OpStage", "Program", "build_program", "geometric_stage"]
