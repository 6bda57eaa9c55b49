"""The batch field table: one entry per field a loader's dict batch may hold (``load(fields=...)``).

Every other description of a batch's fields is derived from :data:`FIELDS`: the names ``fields=`` accepts and
their order (:data:`shardkit.loader.fields.FIELD_KINDS`), which stored field each needs, which are moved with the
pixels (:data:`shardkit.targets.batchdict.TARGET_FIELDS`), which a worker builds per row and which are pixel planes
beside the images in a batch slot (with their bytes per pixel), the attributes of the rows a batch carries
(:class:`shardkit.loader.rows.FieldRows`), how those rows are cut, copied and pickled, and where the delivered
dict takes each value from (:meth:`shardkit.loader.decode.strategies.DecodeStrategy.deliver_fields`).

Each :class:`Field` says:

* ``stored``: the manifest field a dataset must declare for it (``None``: every dataset has it), and ``member``
  the tar member extension that holds it (:data:`shardkit.format.fields.MEMBER_OF`);
* ``dtype`` and ``shape``: what the batch holds (``B`` samples, ``M`` objects, ``S`` output pixels, ``C``
  classes, ``D`` targets, ``K`` keypoints);
* ``layout``: :attr:`Layout.ROW` (one value per sample) or :attr:`Layout.PLANE` (``[B, S, S]`` pixels, made in
  the worker's batch slot beside the images and handed over with it);
* ``geometry``: how a crop, resize or flip moves it (:mod:`shardkit.targets.geometry`'s rule), or
  :attr:`Geometry.NONE`; a field with a rule is a target;
* ``batching``: :attr:`Batching.STACKED` (one tensor, row ``i`` sample ``i``), :attr:`Batching.PADDED` (padded
  to the batch's most objects ``M`` with ``fill``; cut to the kept rows' most objects) or :attr:`Batching.LIST`;
* ``delivery``: :attr:`Delivery.TENSOR` or :attr:`Delivery.LIST` (of str, of dict);
* ``home``: where a batch keeps it (:attr:`Home.ROWS`: an attribute of its
  :class:`~shardkit.loader.rows.FieldRows`; otherwise the batch's own ``images``, ``labels``, ``keys``, or its
  sources computed from its ids);
* ``codec``: how the worker builds a :attr:`Home.ROWS` value from a sample (:data:`shardkit.loader.rows.ROW_CODECS`
  for the per-row fields; ``"objects"`` and ``"png"`` for the targets, built by
  :func:`shardkit.loader.targetrows.target_rows`), and ``attr`` the sample's (or the moved
  :class:`~shardkit.targets.geometry.Targets`') attribute it comes from;
* ``opt_in``: asked for by ``fields=`` only: a field that changes what the other fields hold when asked for (it is
  never part of a default selection, e.g. :func:`shardkit.ops.bench.bench_fields`).

Adding a field:

1. add its :class:`Field` here (the order of :data:`FIELDS` is the order error messages list them in);
2. if it is a row field with a new ``codec``, add the codec: a function in
   :data:`shardkit.loader.rows.ROW_CODECS` (``(samples, spec, field) -> value``); a target field's value is one
   of :func:`~shardkit.loader.targetrows.target_rows`' moved values, named by ``attr``;
3. if it is stored in a new member, the member's rule goes in :mod:`shardkit.format.fields` as for any stored field.

Nothing else names the fields: cutting rows, copying to pinned memory, pickling, the batch slot's layout and the
delivered dict follow the table. This module imports nothing of shardkit (every layer may read it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Optional


class Layout(Enum):
    """One value per sample, or a ``[B, S, S]`` pixel plane."""

    ROW = "row"
    PLANE = "plane"


class Geometry(Enum):
    """How a geometric step moves a field (the rules of :mod:`shardkit.targets.geometry`)."""

    NONE = "none"  #: not moved (a class, a caption, a key)
    PIXELS = "pixels"  #: the image itself: the step's own resampling
    BOXES = "move_boxes"  #: moved, clipped, dropped below ``min_visible`` (:func:`move_boxes`, :func:`clip_boxes`)
    POINTS = "move_points"  #: moved with their boxes, flip pairs swapped (:func:`move_points`, :func:`swap_pairs`)
    ROWS = "compact"  #: a per-object value that follows its box's row (:func:`compact`)
    MASK = "warp_masks"  #: resampled nearest with the pixels' own map (:func:`warp_masks`)
    INSTANCES = "warp_masks+relabel"  #: resampled likewise, object rows relabelled to the kept boxes' rows


class Batching(Enum):
    """How the samples' values become the batch's."""

    STACKED = "stacked"  #: one tensor, row ``i`` sample ``i``
    PADDED = "padded"  #: one tensor ``[B, M, ...]`` padded with ``fill`` to the batch's most objects
    LIST = "list"  #: a list of ``B`` values


class Delivery(Enum):
    """What the user's dict holds."""

    TENSOR = "tensor"
    LIST = "list"


class Home(Enum):
    """Where a batch keeps a field."""

    IMAGES = "images"  #: the batch's pixels (``images``, or the list of ``views``)
    LABELS = "labels"  #: the batch's class labels (every batch has them)
    KEYS = "keys"  #: the batch's keys
    SOURCES = "sources"  #: computed from the batch's sample ids (a mixture's source of each sample)
    ROWS = "rows"  #: an attribute of the batch's :class:`~shardkit.loader.rows.FieldRows`


@dataclass(frozen=True)
class Field:
    """One batch field (see the module docstring for each attribute)."""

    name: str
    stored: Optional[str]
    member: Optional[str]
    dtype: str
    shape: str
    layout: Layout
    geometry: Geometry
    batching: Batching
    delivery: Delivery
    home: Home
    codec: str = ""
    attr: str = ""
    fill: Any = 0
    opt_in: bool = False
    doc: str = ""

    @property
    def is_target(self) -> bool:
        """Moved with the pixels by every crop (and not the pixels themselves)."""
        return self.geometry not in (Geometry.NONE, Geometry.PIXELS)

    @property
    def per_object(self) -> bool:
        """One value per object: padded to the batch's ``M`` (cut to the kept rows' most objects)."""
        return self.batching is Batching.PADDED

    @property
    def plane_bytes(self) -> int:
        """Bytes per output pixel of a :attr:`Layout.PLANE` field."""
        return {"uint8": 1, "bool": 1, "int16": 2, "int32": 4, "float32": 4}[self.dtype]


_ROW, _PLANE = Layout.ROW, Layout.PLANE
_T, _L = Delivery.TENSOR, Delivery.LIST

#: every batch field, in the order ``fields=`` lists them
FIELDS: tuple[Field, ...] = (
    Field("image", "image", "jpg", "uint8", "[B, 3, S, S]", _PLANE, Geometry.PIXELS, Batching.STACKED, _T,
          Home.IMAGES, doc="(with ``views=``: the list of views)"),
    Field("label", "label", "cls", "int64", "[B]", _ROW, Geometry.NONE, Batching.STACKED, _T, Home.LABELS,
          doc="class index"),
    Field("labels", "labels", "labels.json", "uint8", "[B, C]", _ROW, Geometry.NONE, Batching.STACKED, _T,
          Home.ROWS, codec="multi_hot", attr="labels", doc="multi-hot"),
    Field("target", "target", "target.json", "float32", "[B, D]", _ROW, Geometry.NONE, Batching.STACKED, _T,
          Home.ROWS, codec="vector", attr="target"),
    Field("text", "text", "txt", "str", "[B]", _ROW, Geometry.NONE, Batching.LIST, _L, Home.ROWS, codec="list",
          attr="text", fill="", doc="list of str"),
    Field("meta", None, "json", "dict", "[B]", _ROW, Geometry.NONE, Batching.LIST, _L, Home.ROWS, codec="list",
          attr="meta", fill={}, doc="list of dict (the ``.json`` metadata)"),
    Field("key", None, None, "str", "[B]", _ROW, Geometry.NONE, Batching.LIST, _L, Home.KEYS,
          doc='list of str (a mixture\'s: ``"1/00000042"``)'),
    Field("source", None, None, "int64", "[B]", _ROW, Geometry.NONE, Batching.STACKED, _T, Home.SOURCES,
          doc="the source of each sample (one dataset: all 0)"),
    Field("boxes", "boxes", "objects.json", "float32", "[B, M, 4]", _ROW, Geometry.BOXES, Batching.PADDED, _T,
          Home.ROWS, codec="objects", attr="boxes", doc="xyxy in output pixels, 0 beyond each sample's count"),
    Field("box_labels", "boxes", "objects.json", "int64", "[B, M]", _ROW, Geometry.ROWS, Batching.PADDED, _T,
          Home.ROWS, codec="objects", attr="labels", fill=-1, doc="-1 beyond each sample's count"),
    Field("box_count", "boxes", "objects.json", "int64", "[B]", _ROW, Geometry.ROWS, Batching.STACKED, _T,
          Home.ROWS, codec="objects", attr="count", doc="objects per sample"),
    Field("box_crowd", "boxes", "objects.json", "bool", "[B, M]", _ROW, Geometry.ROWS, Batching.PADDED, _T,
          Home.ROWS, codec="objects", attr="crowd", fill=False, opt_in=True,
          doc="crowd region (COCO ``iscrowd``, VOC ``difficult``)"),
    Field("keypoints", "keypoints", "objects.json", "float32", "[B, M, K, 3]", _ROW, Geometry.POINTS,
          Batching.PADDED, _T, Home.ROWS, codec="objects", attr="keypoints", doc="(x, y, visibility)"),
    Field("mask", "mask", "mask.png", "uint8", "[B, S, S]", _PLANE, Geometry.MASK, Batching.STACKED, _T, Home.ROWS,
          codec="png", attr="mask", fill=255, doc="class per pixel, 255: none"),
    Field("instances", "instances", "instances.png", "int16", "[B, S, S]", _PLANE, Geometry.INSTANCES,
          Batching.STACKED, _T, Home.ROWS, codec="png", attr="instances", fill=-1, doc="box row per pixel, -1: none"),
)  # fmt: skip

_index: tuple[tuple[Field, ...], dict[str, Field]] = ((), {})


def by_name() -> Mapping[str, Field]:
    """:data:`FIELDS` by name (rebuilt when :data:`FIELDS` is replaced)."""
    global _index
    fields = FIELDS
    if _index[0] is not fields:
        _index = (fields, {f.name: f for f in fields})
    return _index[1]


def names() -> tuple[str, ...]:
    """Every field's name, in :data:`FIELDS` order."""
    return tuple(f.name for f in FIELDS)


def row_fields() -> tuple[str, ...]:
    """The fields a worker builds per row from a sample's stored members (not targets, not the batch's own)."""
    return tuple(f.name for f in FIELDS if f.home is Home.ROWS and not f.is_target)


def target_fields() -> dict[str, str]:
    """The target fields (moved with the pixels by every crop) and the stored field each needs."""
    return {f.name: f.stored or "" for f in FIELDS if f.is_target}


def planes() -> tuple[str, ...]:
    """The target fields that are pixel planes beside the images in a batch slot."""
    return tuple(f.name for f in FIELDS if f.layout is Layout.PLANE and f.home is Home.ROWS)


def always() -> tuple[str, ...]:
    """The fields every dataset has, whatever it stores."""
    return tuple(f.name for f in FIELDS if f.stored is None or f.stored == "image")


__all__ = [
    "FIELDS",
    "Batching",
    "Delivery",
    "Field",
    "Geometry",
    "Home",
    "Layout",
    "always",
    "by_name",
    "names",
    "planes",
    "row_fields",
    "target_fields",
]
