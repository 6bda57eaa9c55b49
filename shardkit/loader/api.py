"""``shardkit.load``: the one call most users need, with its common options as typed keywords.

The common options are keywords of :func:`load` (an IDE and a type checker see them); every other
option of :class:`~shardkit.loader.config.LoaderConfig` and its groups is still accepted flat through
``**options`` (``shuffle_buffer=``, ``storage_options=``, ``hook=``...). A keyword left at ``None`` is not
given: the value comes from ``config`` (or the defaults, each stated once, on its dataclass field).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from shardkit.format.manifest import Manifest
from shardkit.loader.config import DecodeOn, LoaderConfig, Preset, build_config
from shardkit.loader.dataset import ShardDataset
from shardkit.loader.loader import ShardLoader
from shardkit.loader.view import View
from shardkit.plan import LabelMode, Source


def load(
    url: "str | Manifest | Source | Sequence[str | Source]",
    *,
    batch_size: Optional[int] = None,
    size: Optional[int] = None,
    preset: "Preset | str | None" = None,
    num_workers: Optional[int] = None,
    seed: Optional[int] = None,
    shuffle: Optional[bool] = None,
    drop_last: Optional[bool] = None,
    decode_on: "DecodeOn | str | None" = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    nodes: Optional[int] = None,
    node_affinity: Optional[bool] = None,
    with_keys: bool = False,
    with_source: bool = False,
    epoch_size: Optional[int] = None,
    labels: "LabelMode | str" = LabelMode.MERGED,
    views: Optional[Sequence[View]] = None,
    fields: Optional[Sequence[str]] = None,
    min_visible: Optional[float] = None,
    generation: Optional[int] = None,
    max_hole_bytes: Optional[int] = None,
    config: Optional[LoaderConfig] = None,
    **options: Any,
) -> ShardLoader:
    """Stream a shardkit dataset (or a weighted mixture of several) as uint8 batches ready for the GPU.

    Args:
        url: the split directory or a selection folder (or either's ``manifest.json``): local path, ``s3://``, ``gs://``,
            ``http(s)://`` or any fsspec URL; or a list of :class:`shardkit.Source` (and URLs) to
            mix, each with one of ``weight``/``repeat``/``choose`` (docs/guides/mixing.md).
        batch_size: samples per batch (:class:`~shardkit.plan.ordering.PlanConfig`).
        size: output height and width (:class:`~shardkit.loader.config.ImageConfig`).
        preset: ``"train"`` (random resized crop + flip), ``"eval"`` (resize + center crop), ``"detect"`` (aspect
            kept: scale jitter, crop or pad, flip) or ``"letterbox"`` (aspect kept: fit, centre, pad).
        num_workers: DataLoader worker processes, 0: the main process (:class:`~shardkit.loader.config.WorkerConfig`).
        seed: seed of shard order, shuffle blocks and crops.
        shuffle: shuffle shards and samples (False: manifest order, e.g. for evaluation).
        drop_last: drop each rank's last partial batch.
        decode_on: ``"worker"`` (workers decode) or ``"device"`` (the consumer decodes, e.g. on the GPU).
        rank: this process's rank (with ``world_size``); default from ``torch.distributed``.
        world_size: number of ranks.
        nodes: machines the ranks run on (``world_size // nodes`` ranks each, rank-major); default from
            ``torchrun``'s environment (``LOCAL_WORLD_SIZE``), else 1.
        node_affinity: each node reads the same share of the shards every epoch, shuffled within the share
            (:class:`~shardkit.plan.ordering.PlanConfig`; docs/design/node-affinity.md).
        with_keys: yield ``(images, labels, keys)``; a mixture's keys read ``"1/00000042"``.
        with_source: also yield each sample's source index (int64 ``[B]``), last in the tuple.
        epoch_size: a weighted mixture's samples per epoch (default: the sum of the sources' sizes).
        labels: a mixture's classes ``"merged"`` by name (``loader.classes``) or kept apart ``"per_source"``.
        views: multi-crop :class:`~shardkit.View` groups: yield ``(views, labels, ...)``, ``views`` a list of
            ``sum(v.count)`` uint8 ``[B, 3, v.size, v.size]`` tensors in the order given, each sample decoded once
            (docs/guides/load.md, "Multi-crop views"). Not with ``preset``, ``size``, ``scale``, ``ratio`` or ``flip``.
        fields: yield dicts of these named fields, in this order, instead of tuples: ``"image"`` (or the views),
            ``"label"``, ``"labels"`` (multi-hot uint8 ``[B, C]``), ``"target"`` (float32 ``[B, D]``), ``"text"``,
            ``"meta"``, ``"key"``, ``"source"`` (docs/guides/load.md, "Fields"); a field a dataset does not have is a
            one-line error naming those it has. Not with ``with_keys``, ``with_source`` or ``raw``. Detection and
            segmentation datasets add ``"boxes"`` (float32 ``[B, M, 4]`` xyxy in output pixels), ``"box_labels"``
            (int64 ``[B, M]``, -1 beyond each sample's count), ``"box_count"`` (int64 ``[B]``), ``"keypoints"``
            (float32 ``[B, M, K, 3]``) and ``"mask"`` (uint8 ``[B, S, S]``, 255 where no stored pixel maps), moved
            with each sample's crop and flip (docs/guides/load.md, "Detection and segmentation").
        min_visible: with target fields: drop a box that keeps less than this share of its area in the crop
            (counted in ``loader.stats.boxes_dropped``); default :data:`shardkit.loader.fields.MIN_VISIBLE` (0.1).
        generation: read this generation of an appended or corrected split (default: the newest); the loader
            keeps it for its whole run, and a loaded state re-pins the one it was saved at
            (docs/guides/living-read.md). A selection reads its own generation.
        max_hole_bytes: read through a gap of at most this many bytes between wanted samples of a shard (one
            request instead of two); 0 never reads a sample it does not deliver (fewest bytes, most requests:
            the trade-off of a sparse selection). Default on :class:`~shardkit.loader.config.LoaderConfig`.
        config: a full :class:`~shardkit.loader.config.LoaderConfig`; the keywords and ``options`` given override it.
        **options: any other option, flat: a field of :class:`~shardkit.plan.ordering.PlanConfig`
            (``shuffle_buffer``, ``policy``...), :class:`~shardkit.loader.config.ImageConfig` (``resize_size``,
            ``hook``, ``decoder``...), :class:`~shardkit.loader.config.StorageConfig` (``storage_options``,
            ``cache_dir``...), :class:`~shardkit.loader.config.WorkerConfig` (``prefetch_factor``, ``timeout``...)
            or :class:`~shardkit.loader.config.LoaderConfig` (``strict``, ``raw``, ``log_every_epoch``).

    Each default is documented once, on its dataclass field (e.g. ``num_workers``: the CPUs available to
    this process, at most 8); a keyword left at ``None`` keeps ``config``'s value.

    Returns:
        A :class:`~shardkit.loader.loader.ShardLoader`; ``len()`` is the number of batches per epoch on this rank.
    """
    common = {
        "batch_size": batch_size,
        "size": size,
        "preset": preset,
        "num_workers": num_workers,
        "seed": seed,
        "shuffle": shuffle,
        "drop_last": drop_last,
        "decode_on": decode_on,
        "node_affinity": node_affinity,
    }
    if views is not None:
        given = [k for k in ("preset", "size", "scale", "ratio", "flip") if common.get(k, options.get(k)) is not None]
        if given:
            raise ValueError(
                f"views= and {'/'.join(given)}= are exclusive: each View has its own size, scale, ratio and flip"
            )
        options = {**options, "views": views}
    if fields is not None:
        options = {**options, "fields": fields}
    if min_visible is not None:
        options = {**options, "min_visible": min_visible}
    if max_hole_bytes is not None:
        options = {**options, "max_hole_bytes": max_hole_bytes}
    cfg = build_config(config, {**{k: v for k, v in common.items() if v is not None}, **options})
    ds = ShardDataset(
        url,
        cfg,
        rank=rank,
        world_size=world_size,
        nodes=nodes,
        epoch_size=epoch_size,
        labels=labels,
        generation=generation,
    )
    return ShardLoader(ds, with_keys=with_keys, with_source=with_source)
