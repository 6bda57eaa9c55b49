"""Loading a state checks everything that decides the order and meaning of the rest of the run.

Written as oracles over the config dataclasses: every field of :class:`shardkit.plan.epoch.PlanConfig`
and every spec field of :class:`shardkit.Source` (plus ``epoch_size``) is enumerated
programmatically, changed, and the resume must be refused naming it -- so a field added later is
covered without touching this file. A mixture source replaced by another dataset with the same
shard sizes (other contents, or other class names) is refused naming the source and what differs;
so is switching ``labels`` between save and resume. Options of the wrong kind are refused where the
options are built, naming the option; an explicit ``resize_size`` stays explicit.
"""

from __future__ import annotations

import enum
import json
import shutil
from dataclasses import fields

import pytest
import torch

import shardkit
from shardkit import ShardkitError, Source
from shardkit.format.manifest import load_manifest, save_manifest
from shardkit.loader.config import ImageConfig, LoaderConfig, StorageConfig, WorkerConfig
from shardkit.plan.ordering import PlanConfig
from tests.support.data import write_dataset

KW = dict(size=16, pin_memory=False, num_workers=0, with_keys=True)
BASE = dict(batch_size=3, seed=4, shuffle=True, shuffle_buffer=6, shuffle_initial=2, drop_last=False, policy="pad")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("state")
    a = write_dataset(str(root / "a"), num_samples=14, shard_size=4, num_classes=3, size=(20, 20), distinct_images=2)
    b = write_dataset(str(root / "b"), num_samples=9, shard_size=3, num_classes=2, size=(20, 20), distinct_images=2)
    # b's twins: the same shard sizes (samples per shard), other pixels / other class names
    pixels = write_dataset(
        str(root / "b-pixels"), num_samples=9, shard_size=3, num_classes=2, size=(24, 20), distinct_images=2
    )
    names = str(root / "b-names")
    shutil.copytree(b.url, names)
    m = load_manifest(names)
    m.classes = ["dog", "cat"]
    save_manifest(m, names)
    return {"a": a.url, "b": b.url, "b-pixels": pixels.url, "b-names": names}


def _state(sources, **opts):
    """The state after one batch of ``load(sources, **opts)``, through JSON (as a checkpoint keeps it)."""
    loader = shardkit.load(sources, **{**KW, **opts})
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    loader.close()
    return state


def _other(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, enum.Enum):
        return next(m for m in type(value) if m is not value)
    if isinstance(value, int):
        return value + 1
    raise AssertionError(f"add a rule for {type(value).__name__} to _other (a new PlanConfig field)")


PLAN_FIELDS = [f.name for f in fields(PlanConfig)]


@pytest.mark.parametrize("mixture", [False, True], ids=["one-source", "mixture"])
@pytest.mark.parametrize("name", PLAN_FIELDS)
def test_every_ordering_field_is_checked(ds, name, mixture):
    sources = [Source(ds["a"], repeat=1), Source(ds["b"], repeat=0.5)] if mixture else ds["a"]
    state = _state(sources, **BASE)
    shardkit.load(sources, **{**KW, **BASE}).load_state_dict(state)  # the same options resume
    changed = {**BASE, name: _other(getattr(PlanConfig(**BASE), name))}
    with pytest.raises(ShardkitError, match=rf"other ordering options .*'{name}'"):
        shardkit.load(sources, **{**KW, **changed}).load_state_dict(state)


SPEC_FIELDS = list(Source("x").spec())  # weight, repeat, choose: whatever Source.spec() stores
SPEC_VALUES = {"weight": (1, 2), "repeat": (1, 0.5), "choose": (4, 5)}


@pytest.mark.parametrize("source", [0, 1])
@pytest.mark.parametrize("name", SPEC_FIELDS)
def test_every_mixture_spec_field_is_checked(ds, name, source):
    before, after = SPEC_VALUES[name]  # a KeyError here: give a new spec field two values
    others = {"weight": {"weight": 1}, "repeat": {"repeat": 1}, "choose": {"repeat": 1}}[name]
    specs = [dict(others), dict(others)]
    specs[source] = {name: before}
    sources = [Source(ds["a"], **specs[0]), Source(ds["b"], **specs[1])]
    state = _state(sources, **BASE)
    specs[source] = {name: after}
    changed = [Source(ds["a"], **specs[0]), Source(ds["b"], **specs[1])]
    with pytest.raises(ShardkitError, match=rf"another mixture \(.*source {source}: {name} {before} -> {after}"):
        shardkit.load(changed, **{**KW, **BASE}).load_state_dict(state)
    # the other kind of spec is a difference too
    kind = next(k for k in SPEC_FIELDS if k != name)
    specs[source] = {kind: SPEC_VALUES[kind][0]}
    with pytest.raises(ShardkitError, match=rf"another mixture \(.*source {source}: {name} {before} -> None"):
        shardkit.load([Source(ds["a"], **specs[0]), Source(ds["b"], **specs[1])], **{**KW, **BASE}).load_state_dict(
            state
        )


def test_epoch_size_is_checked(ds):
    sources = [Source(ds["a"], weight=1), Source(ds["b"], weight=1)]
    state = _state(sources, epoch_size=20, **BASE)
    for other in (None, 21):
        with pytest.raises(ShardkitError, match=rf"another mixture \(epoch_size 20 -> {other}"):
            shardkit.load(sources, epoch_size=other, **{**KW, **BASE}).load_state_dict(state)


@pytest.mark.parametrize("twin,what", [("b-pixels", r"shard contents \(sha256\)"), ("b-names", "class names")])
def test_mixture_source_with_the_same_shard_sizes_but_other_data_is_refused(ds, twin, what):
    sources = [Source(ds["a"], repeat=1), Source(ds["b"], repeat=1)]
    state = _state(sources, **BASE)
    swapped = [Source(ds["a"], repeat=1), Source(ds[twin], repeat=1)]
    with pytest.raises(ShardkitError, match=rf"source 1 is another dataset than .*b-\w+.* \({what} differ\)"):
        shardkit.load(swapped, **{**KW, **BASE}).load_state_dict(state)
    # allow_remix finishes the saved epoch with the source of the same shard sizes: the same data only
    remixed = [Source(ds["a"], repeat=1), Source(ds[twin], repeat=2)]
    with pytest.raises(ShardkitError, match=rf"source 1 is another dataset .*\({what} differ\)"):
        shardkit.load(remixed, **{**KW, **BASE}).load_state_dict(state, allow_remix=True)
    shardkit.load(sources, **{**KW, **BASE}).load_state_dict(state)  # the same sources resume
    # between epochs, allow_remix starts the new sources at once: nothing of the saved epoch is left to finish
    loader = shardkit.load(sources, **{**KW, **BASE})
    list(loader)
    boundary = json.loads(json.dumps(loader.state_dict()))
    with pytest.raises(ShardkitError, match=rf"source 1 is another dataset .*\({what} differ\)"):
        shardkit.load(swapped, **{**KW, **BASE}).load_state_dict(boundary)
    shardkit.load(swapped, **{**KW, **BASE}).load_state_dict(boundary, allow_remix=True)


@pytest.mark.parametrize("saved,now", [("merged", "per_source"), ("per_source", "merged")])
@pytest.mark.parametrize("mixture", [False, True], ids=["one-source", "mixture"])
def test_switching_labels_between_save_and_resume_is_refused(ds, saved, now, mixture):
    sources = [Source(ds["a"], repeat=1), Source(ds["b"], repeat=1)] if mixture else ds["a"]
    state = _state(sources, labels=saved, **BASE)
    with pytest.raises(
        ShardkitError, match=rf"loader state field 'labels' is '{saved}' .*resume with labels='{saved}'"
    ):
        shardkit.load(sources, labels=now, **{**KW, **BASE}).load_state_dict(state)
    shardkit.load(sources, labels=saved, **{**KW, **BASE}).load_state_dict(state)


# --------------------------------------------------------------------- options checked where they are built


def _typed_fields(cls, kind):
    return [f.name for f in fields(cls) if f.init and str(f.type) in (kind, f"Optional[{kind}]")]


@pytest.mark.parametrize(
    "name",
    [n for c in (LoaderConfig, PlanConfig, WorkerConfig, ImageConfig, StorageConfig) for n in _typed_fields(c, "int")],
)
def test_an_integer_option_given_a_fraction_is_refused_naming_it(ds, name):
    with pytest.raises(ValueError, match=rf"loader option '{name}' must be an integer.*got float 2\.5"):
        shardkit.load(ds["a"], **{**KW, name: 2.5})


@pytest.mark.parametrize(
    "name",
    [n for c in (LoaderConfig, PlanConfig, WorkerConfig, ImageConfig, StorageConfig) for n in _typed_fields(c, "bool")],
)
def test_a_flag_given_a_string_is_refused_naming_it(ds, name):
    with pytest.raises(ValueError, match=rf"loader option '{name}' must be True or False.*got str 'no'"):
        shardkit.load(ds["a"], **{**KW, name: "no"})


@pytest.mark.parametrize("bad", [2.5, "20", True, 0, -3])
def test_epoch_size_must_be_a_whole_number_of_samples(ds, bad):
    with pytest.raises(
        ValueError, match=r"epoch_size must be an integer >= 1 .* got \w+ " + repr(bad).replace(".", r"\.")
    ):
        shardkit.load([Source(ds["a"], weight=1), Source(ds["b"], weight=1)], epoch_size=bad, **KW)


def test_numpy_integers_are_plain_ints(ds):
    import numpy as np

    loader = shardkit.load(ds["a"], **{**KW, **BASE, "seed": np.int64(4), "batch_size": np.int32(3)})
    assert type(loader.config.plan.seed) is int and type(loader.config.plan.batch_size) is int
    loader.load_state_dict(_state(ds["a"], **BASE))  # the same options as plain ints


def _pixels(loader):
    out = [im.clone() for im, _, _ in loader]
    loader.close()
    return out


def _same(x, y):
    return len(x) == len(y) and all(torch.equal(p, q) for p, q in zip(x, y))


def test_an_explicit_resize_size_stays_explicit_when_the_size_changes(ds):
    """``resize_size=37`` for ``size=32`` equals the derived default (round(32 * 256 / 224)); it was
    re-derived (18) by ``set_epoch(size=16)``. Given stays given; derived follows the size."""
    opts = dict(KW, preset="eval", shuffle=False, batch_size=4)
    given = shardkit.load(ds["a"], **{**opts, "size": 32, "resize_size": 37})
    given.set_epoch(0, size=16)
    derived = shardkit.load(ds["a"], **{**opts, "size": 32})
    derived.set_epoch(0, size=16)
    want_given = _pixels(shardkit.load(ds["a"], **{**opts, "size": 16, "resize_size": 37}))
    want_derived = _pixels(shardkit.load(ds["a"], **{**opts, "size": 16}))
    assert not _same(want_given, want_derived)  # the two resize sizes give other pixels
    assert _same(_pixels(given), want_given)
    assert _same(_pixels(derived), want_derived)
    # the same through load(config=..., size=...): options over a config keep its given values
    cfg = LoaderConfig(
        PlanConfig(batch_size=4, shuffle=False), ImageConfig(preset="eval", size=32, resize_size=37, fast_decode=False)
    )
    assert cfg.image.updated(size=16).resize_size == 37 and cfg.image.updated(preset="train").fast_decode is False
    assert ImageConfig(preset="eval", size=32).updated(size=16).resize_size == 18
    assert _same(
        _pixels(shardkit.load(ds["a"], config=cfg, size=16, **{k: v for k, v in KW.items() if k != "size"})), want_given
    )


def test_a_remix_that_changes_the_classes_says_so(ds, caplog):
    """``allow_remix`` to a source with other class names: the label indices may change meaning; logged, not silent."""
    import logging

    sources = [Source(ds["a"], repeat=1), Source(ds["b"], repeat=1)]
    loader = shardkit.load(sources, **{**KW, **BASE})
    list(loader)  # a whole epoch: the state is at an epoch boundary
    state = json.loads(json.dumps(loader.state_dict()))
    remixed = shardkit.load([Source(ds["a"], repeat=1), Source(ds["b-names"], repeat=1)], **{**KW, **BASE})
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        remixed.load_state_dict(state, allow_remix=True)
    assert any("index other classes" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        shardkit.load([Source(ds["a"], repeat=1), Source(ds["b"], repeat=2)], **{**KW, **BASE}).load_state_dict(
            state, allow_remix=True
        )
    assert not caplog.records  # the same classes: nothing to say
    state["classes"] = "0" * 16  # hand-edited
    with pytest.raises(ShardkitError, match="field 'classes'"):
        shardkit.load(sources, **{**KW, **BASE}).load_state_dict(state)
