"""Typed options of the loader, grouped so that no constructor takes a dozen arguments.

* :class:`ImageConfig` -- what a sample becomes (preset, output size, user hook).
* :class:`StorageConfig` -- where shards come from (fsspec options, cache, safety opt-ins).
* :class:`WorkerConfig` -- the ``DataLoader`` worker processes and shared batch slots.
* :class:`LoaderConfig` -- everything: those groups, the ordering options
  (:class:`shardkit.plan.ordering.PlanConfig`) and three switches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional

from shardkit.choices import Choice, check_types
from shardkit.format.members import MAX_PIXELS
from shardkit.loader.fields import TARGET_KINDS, parse_fields
from shardkit.loader.read.ranges import MAX_HOLE_BYTES
from shardkit.loader.view import View, parse_views, scaled_views
from shardkit.loader.workerconfig import MultiprocessingContext, WorkerConfig, default_num_workers  # noqa: F401
from shardkit.plan.ordering import PlanConfig
from shardkit.storage.opener import StorageConfig


class Preset(Choice):
    """What the loader does to each image before batching."""

    TRAIN = "train"  #: RandomResizedCrop geometry (scale (0.08, 1), ratio (3/4, 4/3)) + horizontal flip
    EVAL = "eval"  #: resize the shorter side to ``resize_size``, center crop ``size`` (deterministic)
    #: detection training, aspect kept: longer side ``s * size`` (``s`` uniform in ``scale``, default (0.5, 1.5)),
    #: a random ``size`` x ``size`` crop or pad, horizontal flip (:mod:`shardkit.loader.decode.letterbox`)
    DETECT = "detect"
    LETTERBOX = "letterbox"  #: detection eval: longer side ``size``, centred, padded (deterministic)


#: the ``scale`` of each preset that has one, unless given: the one place for preset defaults
PRESET_SCALE = {Preset.TRAIN: (0.08, 1.0), Preset.DETECT: (0.5, 1.5)}


class Decoder(Choice):
    """Which JPEG decoder the loader uses (:mod:`shardkit.loader.decode.worker`)."""

    AUTO = "auto"  #: simplejpeg if installed, else PIL
    SIMPLEJPEG = "simplejpeg"  #: libjpeg-turbo with DCT scaling (fastest); PIL for what it cannot read
    PIL = "pil"  #: PIL with ``draft`` (DCT scaling)
    TORCHVISION = "torchvision"  #: ``decode_jpeg`` of TorchCodec (when installed) or torchvision, at full resolution (for comparison)


class DecodeOn(Choice):
    """Where a batch's JPEGs are decoded (:mod:`shardkit.loader.decode.device`)."""

    WORKER = "worker"  #: in the DataLoader workers, straight into the batch (the CPU path)
    DEVICE = "device"  #: workers send JPEG bytes + crop geometry; the consumer decodes on its device


#: ``hook(image 3xSxS uint8, sample) -> image``, called per sample in the worker
SampleHook = Callable[[Any, Any], Any]
#: ``batch_hook(images [n,3,S,S] uint8, labels [n] int64, keys) -> images``, called once per batch in the worker
BatchHook = Callable[[Any, Any, list], Any]


@dataclass(frozen=True)
class ImageConfig:
    """What each sample becomes.

    Attributes:
        preset: :class:`Preset` (``"train"`` or ``"eval"``).
        size: output height and width (square), default 224.
        resize_size: eval only: shorter side before the center crop; default ``round(size * 256 / 224)``.
        scale: train: RandomResizedCrop area range; detect: the range of the longer side over ``size``
            (default per preset: :data:`PRESET_SCALE`).
        ratio: train only: RandomResizedCrop aspect-ratio range.
        flip: train and detect: horizontal flip with probability 0.5.
        hook: optional per-sample CPU transform, ``hook(image, sample) -> image`` on a
            ``3 x size x size`` uint8 tensor (a view into the batch, modified in place or replaced
            by a returned tensor of the same shape and dtype). It must be picklable (a
            module-level function) when workers are spawned.
        batch_hook: optional batch-level CPU transform, ``batch_hook(images, labels, keys) -> images``
            on the whole ``[n, 3, size, size]`` uint8 batch (after the per-sample ``hook``), modified in
            place or replaced by a returned tensor of the same shape and dtype (``None`` counts as in
            place). Prefer it to ``hook`` for anything that can be vectorised. Picklable, like ``hook``.
        decoder: :class:`Decoder`: ``"auto"`` (default: fastest available), ``"simplejpeg"``, ``"pil"`` or ``"torchvision"``.
        fast_decode: libjpeg-turbo's fast integer IDCT and plain chroma upsampling (about 10 %
            less decode time; pixel differences of a few levels, invisible to training). Default
            (None): on for ``train``, off for ``eval``, whose output stays close to torchvision's.
        channels_last: batches are ``[B, 3, S, S]`` in channels-last memory format (NHWC bytes,
            as the resize kernel writes them and as GPU training wants them; NCHW batches measured
            15 % slower). ``False``: contiguous NCHW batches (one more transposing pass).
        decode_on: :class:`DecodeOn`: ``"worker"`` (default: workers decode, crop and resize) or
            ``"device"``: workers only read shards and compute each sample's crop geometry (the same
            boxes and flips); the consumer decodes, crops and resizes the batch on its device
            (``DevicePrefetcher``: on its device, in its side stream; iterating the loader: on the
            CPU). Not with ``hook`` or ``batch_hook`` (they run on the CPU in the worker); ignored with ``raw``.
        max_pixels: images whose header declares more pixels are skipped (and counted) without
            decoding: a decompression bomb (a few KB declaring 65000 x 65000) cannot make a worker
            allocate gigabytes. Default: :data:`shardkit.format.members.MAX_PIXELS` (100 M, the converter's limit too).
        views: multi-crop :class:`~shardkit.loader.view.View` groups (``()``: one image per sample, the preset's);
            each sample is decoded once and cut into every view (the preset, size, scale, ratio and flip are unused).
    """

    preset: Preset = Preset.TRAIN
    size: int = 224
    resize_size: Optional[int] = None
    scale: Optional[tuple[float, float]] = None
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    hook: Optional[SampleHook] = None
    batch_hook: Optional[BatchHook] = None
    decoder: Decoder = Decoder.AUTO
    max_pixels: int = MAX_PIXELS
    fast_decode: Optional[bool] = None
    channels_last: bool = True
    decode_on: DecodeOn = DecodeOn.WORKER
    views: tuple[View, ...] = ()
    #: the options left unset and derived (``resize_size``, ``fast_decode``): :meth:`updated` derives
    #: them again; a value given explicitly stays, even one equal to its derived value
    derived: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_types(self)
        object.__setattr__(
            self, "derived", tuple(n for n in ("resize_size", "fast_decode", "scale") if getattr(self, n) is None)
        )
        object.__setattr__(self, "preset", Preset.parse(self.preset))
        object.__setattr__(self, "decoder", Decoder.parse(self.decoder))
        object.__setattr__(self, "decode_on", DecodeOn.parse(self.decode_on))
        if self.scale is None:
            object.__setattr__(self, "scale", PRESET_SCALE.get(self.preset, PRESET_SCALE[Preset.TRAIN]))
        if self.decode_on is DecodeOn.DEVICE and (self.hook is not None or self.batch_hook is not None):
            raise ValueError("hook and batch_hook run on the CPU in the workers; use decode_on='worker' with them")
        if self.views != ():
            object.__setattr__(self, "views", parse_views(self.views))
            if self.hook is not None or self.batch_hook is not None:
                raise ValueError("hook and batch_hook are not supported with views yet")
        if self.max_pixels < 1:
            raise ValueError(f"max_pixels must be >= 1, got {self.max_pixels}")
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        if self.fast_decode is None:
            object.__setattr__(self, "fast_decode", self._derived_fast_decode())
        if self.resize_size is None:
            object.__setattr__(self, "resize_size", self._derived_resize_size())
        if self.resize_size < self.size:  # type: ignore[operator]
            raise ValueError(f"resize_size ({self.resize_size}) must be >= size ({self.size})")
        if not 0 < self.scale[0] <= self.scale[1] or not 0 < self.ratio[0] <= self.ratio[1]:  # type: ignore[index]
            raise ValueError(f"invalid scale {self.scale} or ratio {self.ratio}")

    def _derived_fast_decode(self) -> bool:
        return self.preset in (Preset.TRAIN, Preset.DETECT)

    def _derived_resize_size(self) -> int:
        return int(round(self.size * 256 / 224))

    def updated(self, **changes: Any) -> "ImageConfig":
        """``dataclasses.replace`` that derives ``resize_size``, ``fast_decode`` and ``scale`` again from the new
        ``size``/``preset`` unless they were given (a given value stays, even one equal to the derived one)."""
        for name in self.derived:
            changes.setdefault(name, None)
        return replace(self, **changes)

    def at_size(self, size: int) -> "ImageConfig":
        """These options with output ``size`` (0: unchanged); ``resize_size`` follows unless set on purpose. With
        ``views``, ``size`` is the first view's and every view scales with it (:func:`~shardkit.loader.view.scaled_views`)."""
        if self.views:
            return self if size in (0, self.views[0].size) else self.updated(views=scaled_views(self.views, size))
        return self if size in (0, self.size) else self.updated(size=size)


def _group_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.init)


#: the option groups of :class:`LoaderConfig`: each flat option name belongs to exactly one
_GROUPS: dict[str, type] = {"plan": PlanConfig, "image": ImageConfig, "source": StorageConfig, "workers": WorkerConfig}


@dataclass(frozen=True, init=False)
class LoaderConfig:
    """All loader options, grouped (see :func:`shardkit.load` for the common ones).

    Attributes:
        plan: :class:`~shardkit.plan.ordering.PlanConfig`: batch size, seed, shuffle, shuffle blocks, rank split.
        image: :class:`ImageConfig`: what a sample becomes.
        source: :class:`StorageConfig`: where shards come from.
        workers: :class:`WorkerConfig`: worker processes and batch slots.
        strict: raise :class:`shardkit.DataError` on a corrupt sample instead of skipping it.
        raw: yield raw samples (bytes, label, metadata) instead of decoded batches.
        fields: the named fields each batch is a dict of, in this order (:data:`~shardkit.loader.fields.FIELD_KINDS`:
            ``image``, ``label``, ``labels``, ``target``, ``text``, ``meta``, ``key``, ``source``, and the targets
            ``boxes``, ``box_labels``, ``box_count``, ``keypoints``, ``mask``); ``()`` (default): the
            ``(images, labels)`` tuple. Not with ``raw`` (raw samples carry every field).
        min_visible: with target fields: a box that keeps less than this share of its area in the crop is
            dropped (counted in ``LoaderStats.boxes_dropped``). ``None``: :data:`~shardkit.loader.fields.MIN_VISIBLE`.
        flip_pairs: with ``keypoints``: the keypoint index pairs swapped when a sample is mirrored.
            ``None``: the manifest's ``flip_pairs``.
        max_hole_bytes: a gap of at most this many bytes between two wanted samples of a shard (samples a
            selection or a correction leaves out, or consumed before a resume) is read through: one range read
            instead of two. Default :data:`shardkit.loader.read.ranges.MAX_HOLE_BYTES` (1 MiB); 0: never read a gap
            (fewest bytes, most requests: a sparse selection on a remote store pays per request).
        log_every_epoch: at the end of each epoch, log :meth:`ShardLoader.report`'s line (the share of
            the epoch the loop waited for data, img/s, skipped, retries, the slowest stage) on the
            ``shardkit.loader`` logger at INFO level.

    Options are given one way: as keywords of :func:`shardkit.load` (every option of every group, flat); a
    ``LoaderConfig`` holds them in their groups (``config.plan.batch_size``), each default stated once, on its group's
    field, and is passed as ``load(config=...)`` to start from options built earlier. A group's option given to
    ``LoaderConfig`` itself is refused naming the group it belongs to.
    """

    plan: PlanConfig
    image: ImageConfig
    source: StorageConfig
    workers: WorkerConfig
    strict: bool
    raw: bool
    log_every_epoch: bool
    fields: tuple[str, ...]
    min_visible: Optional[float]
    flip_pairs: Optional[tuple[tuple[int, int], ...]]
    max_hole_bytes: int

    def __init__(
        self,
        plan: Optional[PlanConfig] = None,
        image: Optional[ImageConfig] = None,
        source: Optional[StorageConfig] = None,
        workers: Optional[WorkerConfig] = None,
        *,
        strict: bool = False,
        raw: bool = False,
        log_every_epoch: bool = False,
        fields: "Sequence[str] | None" = None,
        min_visible: Optional[float] = None,
        flip_pairs: "Sequence[Sequence[int]] | None" = None,
        max_hole_bytes: int = MAX_HOLE_BYTES,
        **misplaced: Any,
    ) -> None:
        if misplaced:
            raise TypeError(misplaced_option(next(iter(misplaced))))
        given = {"plan": plan, "image": image, "source": source, "workers": workers}
        for g, cls in _GROUPS.items():
            if given[g] is not None and not isinstance(given[g], cls):
                raise TypeError(
                    f"LoaderConfig's {g} must be a {cls.__name__}, got {type(given[g]).__name__} (flat options are "
                    "keywords of shardkit.load: load(url, batch_size=256))"
                )
            object.__setattr__(self, g, given[g] if given[g] is not None else cls())
        for name, value in (("strict", strict), ("raw", raw), ("log_every_epoch", log_every_epoch)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "fields", parse_fields(fields))
        object.__setattr__(self, "min_visible", min_visible)
        object.__setattr__(self, "flip_pairs", None if flip_pairs is None else tuple(tuple(p) for p in flip_pairs))
        object.__setattr__(self, "max_hole_bytes", max_hole_bytes)
        check_types(self)
        if self.max_hole_bytes < 0:
            raise ValueError(f"max_hole_bytes must be >= 0 (0: never read through a gap), got {self.max_hole_bytes}")
        if self.fields and self.raw:
            raise ValueError(
                "fields= and raw=True are exclusive: raw samples carry every field (label, labels, target, text, meta)"
            )
        targets = [f for f in self.fields if f in TARGET_KINDS]
        if targets and self.image.views:
            raise ValueError(
                f"fields={targets[0]!r} with views= is not supported: each view is its own crop; load the targets "
                "without views= (one crop per sample)"
            )


def plan_to_dict(cfg: PlanConfig) -> dict[str, Any]:
    """A JSON-friendly dict of a :class:`PlanConfig` (stored in state dicts)."""
    d = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    d["policy"] = cfg.policy.value
    return d


def misplaced_option(name: str) -> str:
    """The one-line error for ``name`` given to :class:`LoaderConfig` itself: where it belongs, or that it is unknown."""
    group = option_names().get(name)
    if group:
        cls = _GROUPS[group].__name__
        return (
            f"LoaderConfig() got {name!r}, an option of its {group} group: pass it to shardkit.load(url, {name}=...), "
            f"or LoaderConfig({group}={cls}({name}=...))"
        )
    return f"LoaderConfig() got an unknown option {name!r}; valid options: {', '.join(sorted(option_names()))}"


def option_names() -> dict[str, str]:
    """Every flat option name of :func:`shardkit.load` -> where it lives: a group of :class:`LoaderConfig`
    (``"plan"``, ``"image"``, ``"source"``, ``"workers"``) or ``""`` (a field of :class:`LoaderConfig` itself)."""
    out = {name: "" for name in _group_names(LoaderConfig) - set(_GROUPS)}
    for g, cls in _GROUPS.items():
        out.update({name: g for name in _group_names(cls)})
    return out


def build_config(config: Optional[LoaderConfig], options: dict[str, Any]) -> LoaderConfig:
    """``config`` (or defaults) with flat ``options`` routed to the dataclass each belongs to."""
    base = config or LoaderConfig()
    where = option_names()
    per_group: dict[str, dict[str, Any]] = {g: {} for g in _GROUPS}
    top: dict[str, Any] = {}
    for k, v in options.items():
        if k not in where:
            raise TypeError(f"unknown loader option {k!r}; valid options: {', '.join(sorted(where))}")
        (per_group[where[k]] if where[k] else top)[k] = v
    for g, changes in per_group.items():
        if changes:
            group = getattr(base, g)
            top[g] = (
                group.updated(**changes) if isinstance(group, (ImageConfig, PlanConfig)) else replace(group, **changes)
            )
    return replace(base, **top)
