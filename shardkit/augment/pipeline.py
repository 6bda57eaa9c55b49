"""``GpuAugment``: a batch augmentation pipeline as an ``nn.Module``.

Scheduling: ops run in the order given. Each run of consecutive geometric ops
becomes one resampling pass (one sampling grid + one ``grid_sample``); a
run made only of fixed integer crops (``CenterCrop``, a ``Resize`` to the same
size) is a slice of the uint8 input instead. Pixel and mix ops run one by one
in between. Put colour ops after the geometric ops (the usual order): then
they work on the small output image, and the result equals torchvision's
sequential semantics; interleaving is allowed and costs one more pass per
geometric run.

Randomness: every batch draws one ``[B, K]`` uniform tensor (``K`` = the
uniforms all ops need) plus the few Beta/normal draws of mix/erase ops from a
``torch.Generator`` on the images' device, created on first use and seeded
from ``seed``. Same seed, same device type, same batches -> same output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from shardkit.augment.affine import warp
from shardkit.augment.base import GeometricOp, MixOp, Op, Params, PixelOp, Size
from shardkit.augment.mixup import invalid_labels, soft_labels
from shardkit.augment.params import make_generator
from shardkit.augment.presets import imagenet_eval_ops, imagenet_train_ops
from shardkit.augment.program import GeometricStage, Program, build_program
from shardkit.augment.target_moves import augment_dict, check_flip_pairs, check_targets, move_crop, move_run
from shardkit.augment.viewops import augment_views
from shardkit.private_apis import mark_batch_dynamic
from shardkit.targets.geometry import MIN_VISIBLE, Targets

MemoryFormat = Literal["contiguous", "channels_last"]
_FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class GpuAugment(nn.Module):
    """Per-sample random augmentation of a whole uint8 batch, on its device.

    Args:
        ops: the ops, in order (see :mod:`shardkit.augment` for the list).
        output_dtype: ``torch.float32``, ``torch.float16`` or ``torch.bfloat16``.
        memory_format: ``"contiguous"`` (NCHW) or ``"channels_last"`` (NHWC strides).
        seed: seed of the per-device generators; ``None`` draws one from
            torch's global generator (so ``torch.manual_seed`` governs it).
        clip_intermediate: ``True``: a rotation/affine op fills what lies
            outside *its own* input, exactly as applying the ops one by one;
            ``False``: only points outside the original input are filled, so a
            rotation after a crop shows real image in its corners.
        compute_dtype: dtype of the pixel maths after the geometric pass
            (which always samples in float32). ``torch.float16`` halves the
            memory traffic of the colour ops on GPUs at about 1/1000 error;
            float32 is exact to torchvision.
        compile: run the deterministic part (:meth:`apply`) through
            ``torch.compile``: the batch dimension is dynamic (one graph for
            every batch size; a batch of 1 gets its own, an empty batch runs
            eagerly); a new input image size compiles once more.
        min_visible: with targets, a box is dropped when less than this fraction of its moved
            area stays inside the output (default :data:`~shardkit.targets.geometry.MIN_VISIBLE`:
            kept while any of it shows); counted in :attr:`objects_dropped`.
        flip_pairs: with keypoints, the ``(i, j)`` keypoint indices that swap names when a map
            mirrors the image (``left_eye``/``right_eye``; the dataset's: ``loader.flip_pairs``);
            required with keypoints (``()`` when none swap), so a flip never silently leaves a
            "left" point on the right.

    Call with ``images`` (``uint8 [B, 3, H, W]``, any strides, or float in
    ``[0, 1]``) and optionally ``labels``; returns the images, or
    ``(images, labels)`` when labels are given. With a MixUp/CutMix op the
    labels become float32 soft labels ``[B, num_classes]``; a class index outside
    ``[0, num_classes)`` becomes an all-zero row and is counted in :attr:`label_errors`
    (on CUDA it would otherwise be a device-side assert; checking it per batch would
    wait for the device). An empty batch gives an empty result of the usual shape.

    Targets: ``aug(images, targets=targets)`` returns ``(images, targets)`` and ``aug(batch)`` a loader
    dict batch with ``image`` and its target fields moved (:mod:`shardkit.augment.target_moves`); colour
    ops and :class:`RandomErasing` leave targets alone, MixUp/CutMix refuse them.
    """

    #: takes dict batches with target fields and moves them (``DevicePrefetcher`` hands such a batch whole)
    moves_targets = True

    def __init__(
        self,
        ops: Sequence[Op],
        *,
        output_dtype: torch.dtype = torch.float32,
        memory_format: MemoryFormat = "contiguous",
        seed: int | None = None,
        clip_intermediate: bool = True,
        compute_dtype: torch.dtype = torch.float32,
        compile: bool = False,
        min_visible: float = MIN_VISIBLE,
        flip_pairs: Sequence[Sequence[int]] | None = None,
    ) -> None:
        super().__init__()
        for op in ops:
            if not isinstance(op, Op):
                raise TypeError(f"ops must be shardkit.augment ops, got {op!r}")
        if output_dtype not in _DTYPES:
            raise ValueError(f"output_dtype must be one of {_DTYPES}, got {output_dtype}")
        if compute_dtype not in _DTYPES:
            raise ValueError(f"compute_dtype must be one of {_DTYPES}, got {compute_dtype}")
        if memory_format not in _FORMATS:
            raise ValueError(f"memory_format must be one of {tuple(_FORMATS)}, got {memory_format!r}")
        classes = {op.num_classes for op in ops if isinstance(op, MixOp)}
        if len(classes) > 1:
            raise ValueError(f"all MixUp/CutMix ops need the same num_classes, got {sorted(classes)}")
        self.ops: tuple[Op, ...] = tuple(ops)
        self.output_dtype = output_dtype
        self.memory_format: MemoryFormat = memory_format
        self.clip_intermediate = clip_intermediate
        self.compute_dtype = compute_dtype
        self.num_classes: int | None = classes.pop() if classes else None
        self._offsets: list[int] = []
        total = 0
        for op in self.ops:
            self._offsets.append(total)
            total += op.num_uniforms()
        self._num_uniforms = total
        self._programs: dict[Size, Program] = {}
        self._generators: dict[str, torch.Generator] = {}
        self.seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else int(seed)
        self._compile = compile
        self._compiled: Callable[..., Any] | None = None
        self._label_errors: dict[str, Tensor] = {}  # per device: out-of-range class indices seen, counted there
        if not 0.0 <= min_visible <= 1.0:
            raise ValueError(f"min_visible must be a fraction in [0, 1], got {min_visible}")
        self.min_visible = float(min_visible)
        self.flip_pairs: tuple[tuple[int, int], ...] | None = (
            None if flip_pairs is None else check_flip_pairs(flip_pairs)
        )
        self._compiled_targets: Callable[..., Any] | None = None
        self._dropped: dict[str, Tensor] = {}  # per device: objects dropped by min_visible/clipping, counted there

    # --- randomness ---------------------------------------------------------

    def manual_seed(self, seed: int) -> None:
        """Reseed: the next batches repeat what a new module with ``seed`` gives
        (e.g. ``aug.manual_seed(seed + epoch)`` at the start of each epoch)."""
        self.seed = int(seed)
        self._generators.clear()

    def generator(self, device: torch.device | str) -> torch.Generator:
        """The generator used for ``device`` (created and seeded on first use)."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        key = str(device)
        if key not in self._generators:
            self._generators[key] = make_generator(self.seed, device)
        return self._generators[key]

    # --- compiling -----------------------------------------------------------

    @property
    def needs_labels(self) -> bool:
        """Whether the pipeline mixes labels (has a MixUp or CutMix op)."""
        return self.num_classes is not None

    def output_size(self, size: Size) -> Size:
        """``(height, width)`` of the output for inputs of ``size``."""
        return self._program(size).out_size

    def _program(self, size: Size) -> Program:
        size = (int(size[0]), int(size[1]))
        if size not in self._programs:
            self._programs[size] = self._build_program(size)
        return self._programs[size]

    def _build_program(self, size: Size) -> Program:
        return build_program(self.ops, size, clip_intermediate=self.clip_intermediate)

    # --- running --------------------------------------------------------------

    def sample_params(self, batch_size: int, size: Size, device: torch.device | str) -> list[Params]:
        """Draw every op's per-sample parameters for a batch of ``batch_size``
        images of ``size`` on ``device`` (one list entry per op)."""
        device = torch.device(device)
        prog = self._program(size)
        gen = self.generator(device)
        u = torch.rand(batch_size, max(self._num_uniforms, 1), generator=gen, device=device)
        out = []
        for op, off, op_size in zip(self.ops, self._offsets, prog.op_sizes):
            out.append(op.sample(u[:, off : off + op.num_uniforms()], op_size, gen))
        return out

    def apply(  # type: ignore[override]  # not nn.Module.apply(fn): the public, compile-ready augmentation step
        self, images: Tensor, params: list[Params], labels: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """The deterministic part: apply ``params`` (from :meth:`sample_params`).

        Returns:
            ``(images, labels)`` (``labels`` is ``None`` when none were given).
        """
        out, labels, _, _ = self._run(images, params, labels, None)
        return out, labels

    def apply_targets(self, images: Tensor, params: list[Params], targets: Targets) -> tuple[Tensor, Targets, Tensor]:
        """:meth:`apply` with targets: each geometric run moves them by its own map (compile-ready).

        Returns:
            ``(images, targets, dropped)``: ``dropped`` int64 ``[B]``, the objects each sample lost.
        """
        if self.needs_labels:
            raise ValueError(
                "MixUp/CutMix blend two samples, whose boxes and masks cannot be one sample's targets: "
                "leave them out of a GpuAugment used with targets"
            )
        out, _, moved, dropped = self._run(images, params, None, targets)
        assert moved is not None and dropped is not None
        return out, moved, dropped

    def _run(
        self, images: Tensor, params: list[Params], labels: Tensor | None, targets: Targets | None
    ) -> tuple[Tensor, Tensor | None, Targets | None, Tensor | None]:
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [B, 3, H, W], got shape {tuple(images.shape)}")
        if images.dtype != torch.uint8 and not images.is_floating_point():
            raise ValueError(f"images must be uint8 (0-255) or float (0-1), got {images.dtype}")
        if labels is not None and self.num_classes is not None:
            labels = soft_labels(labels, self.num_classes)
        prog = self._program((images.shape[2], images.shape[3]))
        x = images
        dropped = None if targets is None else torch.zeros_like(targets.count)  # objects each sample lost
        moves = {"min_visible": self.min_visible, "flip_pairs": self.flip_pairs or ()}
        owned = False  # x is our own float tensor (safe to modify in place)
        dtype = self.compute_dtype
        pending = 1.0 / 255.0 if images.dtype == torch.uint8 else 1.0
        for stage in prog.stages:
            if isinstance(stage, GeometricStage) and stage.crop is not None:
                t, l_, h, w = stage.crop
                x = x[:, :, t : t + h, l_ : l_ + w]
                if targets is not None:
                    targets, lost = move_crop(targets, stage.crop, **moves)  # type: ignore[arg-type]
                    dropped = lost if dropped is None else dropped + lost
                continue
            if isinstance(stage, GeometricStage):
                mats = []
                for k, i in enumerate(stage.indices):
                    op = self.ops[i]
                    assert isinstance(op, GeometricOp)
                    mats.append(op.matrix(params[i], stage.sizes[k], stage.sizes[k + 1], x.device))
                x = warp(x, mats, list(stage.sizes), list(stage.fills), scale=pending, out_dtype=dtype)
                if targets is not None:
                    targets, lost = move_run(targets, mats, stage.sizes, stage.cuts, **moves)  # type: ignore[arg-type]
                    dropped = lost if dropped is None else dropped + lost
                pending, owned = 1.0, True
                continue
            if not owned:
                x = x.to(dtype, copy=True)
                owned = True
            if pending != 1.0:
                x = x * pending
                pending = 1.0
            op = self.ops[stage.index]
            if isinstance(op, PixelOp):
                x = op.apply(x, params[stage.index])
            else:
                assert isinstance(op, MixOp)
                if labels is None:
                    raise ValueError(f"{type(op).__name__} mixes labels: call with (images, labels)")
                x, labels = op.apply(x, labels, params[stage.index])
        if not owned:
            x = x.to(dtype, copy=True)
        if pending != 1.0:
            x = x.mul_(pending)
        fmt = _FORMATS[self.memory_format]
        return x.to(dtype=self.output_dtype, memory_format=fmt).contiguous(memory_format=fmt), labels, targets, dropped

    def step(self, images: Tensor, params: list[Params], labels: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """:meth:`apply`, through ``torch.compile`` when built with ``compile=True`` (what a call runs after
        drawing ``params`` with :meth:`sample_params`)."""
        fn = self.apply
        if self._compile and images.shape[0] > 0:  # an empty batch runs eagerly: nothing to gain, no graph to build
            if self._compiled is None:
                self._compiled = torch.compile(self.apply)
            # one graph for every batch size (skips, drops, the last partial batch), not one per size
            mark_batch_dynamic(
                [images, *(t for p in params for t in p.values()), *([] if labels is None else [labels])]
            )
            fn = self._compiled
        return fn(images, params, labels)

    def step_targets(self, images: Tensor, params: list[Params], targets: Targets) -> tuple[Tensor, Targets, Tensor]:
        """:meth:`apply_targets`, through ``torch.compile`` when built with ``compile=True``."""
        fn = self.apply_targets
        if images.shape[0] > 0 and self._compile:
            if self._compiled_targets is None:
                self._compiled_targets = torch.compile(self.apply_targets)
            fields = (targets.boxes, targets.labels, targets.count, targets.crowd)
            pixels = (targets.keypoints, targets.mask, targets.instances)
            mark_batch_dynamic(
                [images, *(t for p in params for t in p.values()), *fields, *(t for t in pixels if t is not None)]
            )
            fn = self._compiled_targets
        return fn(images, params, targets)

    def forward(
        self,
        images: Tensor | list[Tensor] | Mapping[str, Any],
        labels: Tensor | None = None,
        *,
        targets: Targets | None = None,
    ) -> Any:
        """Augment ``images``; returns ``images`` or ``(images, labels)`` if labels were given.

        ``images`` may be the list of views of ``load(views=...)``: every view goes through these
        ops (:func:`~shardkit.augment.viewops.augment_views`; one op list per view group:
        :class:`~shardkit.augment.ViewAugment`).

        With ``targets`` (:class:`~shardkit.targets.geometry.Targets`) returns ``(images, targets)``
        (``(images, labels, targets)`` with labels, which pass through); a dict batch (``image``
        and target fields, :mod:`shardkit.targets.batchdict`) returns the dict, augmented."""
        if isinstance(images, Mapping):
            return augment_dict(self, images)
        if targets is not None:
            if isinstance(images, (list, tuple)):
                raise ValueError("targets cannot follow the views list of load(views=...): augment one image batch")
            check_targets(targets, images, self.flip_pairs)
            params = self.sample_params(images.shape[0], (images.shape[2], images.shape[3]), images.device)
            out, moved, dropped = self.step_targets(images, params, targets)
            self._count(self._dropped, dropped.sum())
            return (out, moved) if labels is None else (out, labels, moved)
        if isinstance(images, (list, tuple)):
            if self.needs_labels:
                raise ValueError("MixUp/CutMix is not supported on the views list of load(views=...)")
            augmented = augment_views(self, images)
            return augmented if labels is None else (augmented, labels)
        params = self.sample_params(images.shape[0], (images.shape[2], images.shape[3]), images.device)
        if labels is not None and self.num_classes is not None and labels.ndim == 1:
            self._count_label_errors(labels)
        out, out_labels = self.step(images, params, labels)
        if labels is None:
            return out
        assert out_labels is not None
        return out, out_labels

    def _count_label_errors(self, labels: Tensor) -> None:
        self._count(self._label_errors, invalid_labels(labels, self.num_classes).sum())  # type: ignore[arg-type]

    @staticmethod
    def _count(counters: dict[str, Tensor], n: Tensor) -> None:
        """Add ``n`` (a device scalar) to the counter of its device, on the device (no sync)."""
        key = str(n.device)
        if key in counters:
            counters[key].add_(n)
        else:
            counters[key] = n.clone()

    @property
    def objects_dropped(self) -> int:
        """How many objects (boxes with their keypoints) the geometric ops dropped so far: moved out of the
        output, or less than ``min_visible`` of them left. Reading it waits for the device (once an epoch)."""
        return sum(int(t.item()) for t in self._dropped.values())

    @property
    def label_errors(self) -> int:
        """How many class indices outside ``[0, num_classes)`` the MixUp/CutMix labels had so far
        (each became an all-zero soft label). Reading it waits for the device: check it once an
        epoch, not per batch. (:class:`~shardkit.loader.prefetch.DevicePrefetcher` refuses such labels
        on the host before they reach the device.)"""
        return sum(int(t.item()) for t in self._label_errors.values())

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_compiled"] = None  # compiled functions do not pickle; recompiled on first use
        state["_compiled_targets"] = None
        return state

    def extra_repr(self) -> str:
        ops = ",\n  ".join(repr(op) for op in self.ops)
        return f"ops=[\n  {ops}\n], output_dtype={self.output_dtype}, memory_format={self.memory_format!r}, seed={self.seed}"

    # --- presets --------------------------------------------------------------

    @classmethod
    def imagenet_train(cls, size: int = 224, **kwargs: Any) -> "GpuAugment":
        """timm-style ImageNet training: random resized crop to ``size``,
        horizontal flip, colour jitter 0.4, ImageNet normalisation.
        ``kwargs`` go to the constructor (e.g. ``output_dtype``)."""
        return cls(imagenet_train_ops(size), **kwargs)

    @classmethod
    def imagenet_eval(cls, size: int = 224, **kwargs: Any) -> "GpuAugment":
        """ImageNet evaluation: centre crop to ``size`` (ship ``size / 0.875``
        from the loader, e.g. 256 for 224), ImageNet normalisation."""
        return cls(imagenet_eval_ops(size), **kwargs)
