"""ViewAugment: a pipeline per view group over the views list of ``load(views=...)``, on CPU.

Oracles: (1) every view against an independent per-sample reference (torchvision's functional ops, applied one view
and one sample at a time with the parameters the pipeline drew, recorded and replayed; which recipe and which rows of
the draw a view gets is worked out here from the groups alone); (2) the batched path (views of one recipe and size
concatenated) equals the per-view path exactly; (3) a group's ops never touch another group's views; (4) every view of
every sample draws its own parameters; (5) seeds; (6) DINO's recipe against a transcription of
``DataAugmentationDINO``; (7) one-line errors.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

from shardkit.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CenterCrop,
    ColorJitter,
    GaussianBlur,
    GeometricOp,
    GpuAugment,
    HorizontalFlip,
    MixUp,
    Normalize,
    RandomGrayscale,
    RandomResizedCrop,
    RandomSolarize,
    ViewAugment,
    ViewOps,
    dino_groups,
)
from shardkit.augment.viewops import derive_seed

SETTINGS = settings(derandomize=True, deadline=None, max_examples=12)

#: recipes of pixel ops only (the reference below knows each of them)
POOL: list[list] = [
    [ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8, order="random")],
    [ColorJitter(0.5, 0.3, 0.4), RandomGrayscale(0.5)],
    [GaussianBlur(3, (0.1, 2.0), p=0.5), RandomSolarize(0.5, p=0.5)],
    [RandomSolarize(0.4, p=0.7), Normalize(IMAGENET_MEAN, IMAGENET_STD)],
    [],  # no ops: the view as float / 255
]
#: recipes with geometric stages too (a warp, a uint8 crop slice), for batched == per view
GEOMETRIC: list[list] = [
    [RandomResizedCrop(6), HorizontalFlip(), ColorJitter(0.3, 0.3)],
    [CenterCrop(6), RandomSolarize(0.5, p=0.5)],
    [HorizontalFlip(), GaussianBlur(3, p=0.5)],
]


def views_of(sizes: list[int], b: int, seed: int = 0) -> list[torch.Tensor]:
    """Noise views, a different image per view and sample (a view routed to the wrong place shows)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (b, 3, s, s), dtype=torch.uint8, generator=g) for s in sizes]


@st.composite
def structures(draw, pool: list[list] = POOL):
    """(groups as (count, recipe index, {j: recipe index}), view sizes, batch size, seed)."""
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 4))
        ops = draw(st.integers(0, len(pool) - 1))
        over = draw(st.dictionaries(st.integers(0, count - 1), st.integers(0, len(pool) - 1), max_size=2))
        groups.append((count, ops, over))
    n = sum(c for c, _, _ in groups)
    sizes = draw(st.lists(st.sampled_from([8, 12]), min_size=n, max_size=n))
    return groups, sizes, draw(st.integers(1, 3)), draw(st.integers(0, 2**40))


def build(groups, pool: list[list] = POOL, **kw) -> ViewAugment:
    return ViewAugment(
        [ViewOps(c, pool[o], overrides={j: pool[r] for j, r in over.items()}) for c, o, over in groups], **kw
    )


class Recorder:
    """Records every ``GpuAugment.sample_params`` call: (ops, size, rows, params)."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, tuple[int, int], int, list[dict]]] = []
        self._orig = GpuAugment.sample_params

    def __enter__(self) -> Recorder:
        rec, orig = self, self._orig

        def sample_params(aug, n, size, device):
            params = orig(aug, n, size, device)
            rec.calls.append((tuple(aug.ops), (int(size[0]), int(size[1])), n, params))
            return params

        self._patch = mock.patch.object(GpuAugment, "sample_params", sample_params)
        self._patch.start()
        return self

    def __exit__(self, *exc) -> None:
        self._patch.stop()


def reference_op(op, x: torch.Tensor, p: dict) -> torch.Tensor:
    """One op on one image ``[3, H, W]`` float in [0, 1] with its parameters, by torchvision."""
    if isinstance(op, ColorJitter):
        names = ["brightness", "contrast", "saturation", "hue"]
        fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
        for i in p["order"].tolist() if "order" in p else range(4):
            if names[i] in p:
                x = fns[i](x, float(p[names[i]]))
        return x
    if isinstance(op, RandomGrayscale):
        return F.rgb_to_grayscale(x, 3) if bool(p["apply"]) else x
    if isinstance(op, GaussianBlur):
        sigma = float(p["sigma"])
        return F.gaussian_blur(x, [op.kernel_size, op.kernel_size], [sigma, sigma])
    if isinstance(op, RandomSolarize):
        return F.solarize(x, op.threshold) if bool(p["apply"]) else x
    if isinstance(op, Normalize):
        return F.normalize(x, list(op.mean), list(op.std))
    raise AssertionError(f"no reference for {op!r}")


def expected_recipes(groups, pool: list[list] = POOL) -> list[tuple]:
    """The ops of each view of the list, from the groups alone."""
    return [tuple(pool[over.get(j, o)]) for c, o, over in groups for j in range(c)]


@SETTINGS
@given(structures())
@example(([(2, 0, {1: 2}), (3, 4, {0: 1})], [12, 12, 8, 8, 8], 2, 7))  # DINO-like: an override in each group
@example(([(1, 1, {}), (2, 1, {}), (2, 3, {1: 1})], [8, 12, 8, 8, 12], 3, 1))  # a recipe shared across groups
def test_every_view_matches_the_per_sample_reference(structure):
    """Oracle: view i goes through the ops of its group (or its override), with rows [j B, (j+1) B) of its recipe's
    draw for its size (j: earlier views of the same recipe and size), applied by torchvision one sample at a time."""
    groups, sizes, b, seed = structure
    views = views_of(sizes, b, seed % 1000)
    with Recorder() as rec:
        out = build(groups, seed=seed)(views)
    recipes = expected_recipes(groups)
    assert len(out) == len(views)
    for i, (recipe, view) in enumerate(zip(recipes, views)):
        size = (sizes[i], sizes[i])
        calls = [c for c in rec.calls if c[0] == recipe and c[1] == size]
        assert len(calls) == 1, f"view {i}: {len(calls)} draws for its recipe and size"
        _, _, rows, params = calls[0]
        j = sum(1 for k in range(i) if recipes[k] == recipe and sizes[k] == sizes[i])
        assert rows == b * sum(1 for k in range(len(views)) if recipes[k] == recipe and sizes[k] == sizes[i])
        assert out[i].shape == (b, 3, *size) and out[i].dtype == torch.float32
        for s in range(b):
            ref = view[s].float() / 255
            for op, p in zip(recipe, params):
                ref = reference_op(op, ref, {k: v[j * b + s] for k, v in p.items()})
            err = (out[i][s] - ref).abs().max().item()
            assert err < 1e-4, f"view {i} sample {s}: {err}"


@SETTINGS
@given(structures(GEOMETRIC + POOL), st.sampled_from(["contiguous", "channels_last"]))
@example(([(3, 0, {1: 1}), (2, 1, {})], [12, 12, 12, 12, 8], 2, 3), "contiguous")
def test_batched_views_equal_one_view_at_a_time(structure, memory_format):
    """Concatenating the views of one recipe and size, one parameter draw, splitting back == each view alone with its
    rows of the draw: exactly, geometric stages included."""
    groups, sizes, b, seed = structure
    views = views_of(sizes, b, 1)
    pool = GEOMETRIC + POOL
    fast = build(groups, pool, seed=seed, memory_format=memory_format)(views)
    slow = build(groups, pool, seed=seed, memory_format=memory_format, batched=False)(views)
    for i, (f, s) in enumerate(zip(fast, slow)):
        assert f.shape == s.shape and torch.equal(f, s), f"view {i}"
        assert f.is_contiguous(memory_format=getattr(torch, memory_format.replace("contiguous", "contiguous_format")))


def test_gpu_augment_on_a_views_list_is_one_draw_over_the_concatenation():
    """``GpuAugment(ops)(views)``: the views of each size, in order, are one batch of the pipeline (one draw), so they
    equal the same pipeline on ``torch.cat`` of them, split back."""
    ops = [RandomResizedCrop(6), ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), RandomSolarize(p=0.5)]
    views = views_of([12, 8, 12, 8, 12], 3)
    got = GpuAugment(ops, seed=4)(views)
    ref = GpuAugment(ops, seed=4)
    big = ref(torch.cat([views[0], views[2], views[4]])).split(3)
    small = ref(torch.cat([views[1], views[3]])).split(3)
    for g, r in zip(got, [big[0], small[0], big[1], small[1], big[2]]):
        assert torch.equal(g, r)
    out, labels = GpuAugment(ops, seed=4)(views, torch.arange(3))
    assert torch.equal(labels, torch.arange(3)) and all(torch.equal(g, o) for g, o in zip(got, out))


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**30))
def test_a_groups_ops_never_touch_another_groups_views(n_first, n_second, b, seed):
    """Oracle: a group without ops gives its views / 255 exactly, whatever the other group does, before or after it."""
    heavy = [
        ColorJitter(0.4, 0.4, 0.2, 0.1),
        GaussianBlur(3),
        RandomSolarize(p=1.0),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]
    views = views_of([8] * (n_first + n_second), b, seed % 97)
    for groups, plain in (
        ([(n_first, []), (n_second, heavy)], range(n_first)),
        ([(n_first, heavy), (n_second, [])], range(n_first, n_first + n_second)),
    ):
        out = ViewAugment(groups, seed=seed)(views)
        for i in range(len(views)):
            if i in plain:
                assert torch.equal(out[i], views[i].float() * (1 / 255)), f"view {i} was touched"
            else:
                assert not torch.allclose(out[i], views[i].float() / 255), f"view {i} was not augmented"


def test_every_view_of_every_sample_draws_its_own_parameters():
    """A flat grey image through brightness jitter shows the factor: all (view, sample) pairs differ, within a recipe's
    concatenated views and across recipes (DINO's two global views, the locals)."""
    b = 5
    views = [torch.full((b, 3, s, s), 100, dtype=torch.uint8) for s in [16, 16] + [8] * 6]
    jitter = [ColorJitter(brightness=0.4)]
    aug = ViewAugment([ViewOps(2, jitter, overrides={1: [*jitter, RandomSolarize(p=0.0)]}), (6, jitter)], seed=3)
    out = aug(views)
    values = torch.stack([o[:, 0, 0, 0] for o in out])  # [views, samples]
    assert values.unique().numel() == values.numel(), values
    for o in out:  # one factor per image
        assert torch.equal(o, o[:, :1, :1, :1].expand_as(o))
    with Recorder() as rec:
        ViewAugment.dino(local_crops_number=6, seed=3)(views)
    bright = torch.cat([p[0]["brightness"] for _, _, _, p in rec.calls])
    jittered = bright[bright != 1.0]  # p=0.8: the others keep factor 1
    assert jittered.numel() > 0.5 * bright.numel() and jittered.unique().numel() == jittered.numel()


def test_same_seed_same_output_and_batches_differ():
    views = views_of([16, 16, 8, 8, 8], 3)
    a, b = ViewAugment.dino(3, seed=11), ViewAugment.dino(3, seed=11)
    first = a(views)
    assert all(torch.equal(x, y) for x, y in zip(first, b(views)))
    second = a(views)  # the next batch draws anew
    assert all(not torch.equal(x, y) for x, y in zip(first, second))
    other = ViewAugment.dino(3, seed=12)(views)
    assert all(not torch.equal(x, y) for x, y in zip(first, other))
    a.manual_seed(12)  # == a new module with that seed
    assert all(torch.equal(x, y) for x, y in zip(a(views), other))


def test_recipe_seeds_are_distinct_across_recipes_and_neighbouring_seeds():
    """manual_seed(seed + epoch): no recipe of one epoch repeats another recipe's stream of a nearby epoch."""
    seeds = [p.seed for s in range(50) for p in ViewAugment.dino(seed=s).pipelines]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(0, 0) == derive_seed(0, 0) != derive_seed(0, 1)


def test_adding_a_group_does_not_change_the_other_groups_draws():
    views = views_of([16, 16, 8, 8, 8], 2)
    dino = ViewAugment.dino(3, seed=5)(views)
    globals_only = ViewAugment(dino_groups()[:1], seed=5)(views[:2])
    assert all(torch.equal(x, y) for x, y in zip(dino[:2], globals_only))


def test_output_options_reach_every_view_and_an_empty_batch_works():
    views = views_of([16, 16, 8, 8], 0)
    aug = ViewAugment.dino(2, seed=0, output_dtype=torch.bfloat16, memory_format="channels_last")
    out = aug(views)
    assert [o.shape for o in out] == [v.shape for v in views]
    assert all(o.dtype == torch.bfloat16 and o.is_contiguous(memory_format=torch.channels_last) for o in out)
    out, labels = aug(views_of([16, 16, 8, 8], 2), torch.tensor([1, 2]))
    assert labels.tolist() == [1, 2] and len(out) == 4


# --- DINO ------------------------------------------------------------------

#: DataAugmentationDINO (facebookresearch/dino main_dino.py), after the crop and the flip: (blur p, solarize p)
DINO = {"global_1": (1.0, None), "global_2": (0.1, 0.2), "local": (0.5, None)}


def test_dino_recipe_is_data_augmentation_dino():
    groups = dino_groups(local_crops_number=8)
    assert [g.count for g in groups] == [2, 8]
    views = [groups[0].recipe(0), groups[0].recipe(1)] + [groups[1].recipe(j) for j in range(8)]
    names = ["global_1", "global_2"] + ["local"] * 8
    for name, ops in zip(names, views):
        blur_p, solarize_p = DINO[name]
        assert not any(isinstance(op, GeometricOp) for op in ops), "the loader crops and flips"
        jitter, gray, blur, *rest, norm = ops
        assert jitter == ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8, order="random")  # torchvision permutes its order
        assert gray == RandomGrayscale(0.2)
        assert isinstance(blur, GaussianBlur) and blur.sigma == (0.1, 2.0) and blur.p == blur_p
        assert rest == ([] if solarize_p is None else [RandomSolarize(0.5, p=solarize_p)])
        assert norm == Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    aug = ViewAugment.dino(seed=0, jitter_order="fixed", blur_kernel=9)
    assert [len(m) for m in aug.members] == [1, 1, 8]
    assert aug.recipe_of(1).ops[2] == GaussianBlur(9, (0.1, 2.0), p=0.1)


def test_dino_end_to_end_probabilities():
    """Over many samples: the first global view is always blurred and never solarized, the second is solarized about
    a fifth of the time, the locals blurred about half of the time."""
    b = 400
    views = [torch.full((b, 3, s, s), 200, dtype=torch.uint8) for s in [16, 16, 8, 8]]
    with Recorder() as rec:
        ViewAugment.dino(2, seed=1)(views)
    by_len = {len(ops): p for ops, _, _, p in rec.calls}
    g1, g2, local = rec.calls[0][3], by_len[5], rec.calls[2][3]
    assert bool((g1[2]["sigma"] >= 0.1).all())
    assert abs(float((g2[2]["sigma"] >= 0.1).float().mean()) - 0.1) < 0.05
    assert abs(float(g2[3]["apply"].float().mean()) - 0.2) < 0.05
    assert abs(float((local[2]["sigma"] >= 0.1).float().mean()) - 0.5) < 0.06


@SETTINGS
@given(st.integers(1, 255), st.floats(0.0, 1.0))
@example(128, 1.0)
@example(100, 0.4)  # some samples are left alone
def test_solarize_matches_pil(threshold, p):
    """RandomSolarize(threshold=(t - 0.5) / 255) on every uint8 value == PIL's ImageOps.solarize(img, t) on the
    samples drawn to apply (0.5 is PIL's default 128), and the identity on the others."""
    values = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16).expand(8, 3, 16, 16).contiguous()
    aug = GpuAugment([RandomSolarize((threshold - 0.5) / 255, p=p)], seed=threshold)
    params = aug.sample_params(8, (16, 16), "cpu")
    out, _ = aug.apply(values, params)
    pil = np.asarray(ImageOps.solarize(Image.fromarray(values[0].permute(1, 2, 0).numpy()), threshold))
    pil = torch.from_numpy(pil.copy()).permute(2, 0, 1).float()
    for s in range(8):
        ref = pil if params[0]["apply"][s] else values[s].float()
        assert torch.equal((out[s] * 255).round(), ref), s


# --- errors ----------------------------------------------------------------


def one_line_error(fn, *match: str) -> str:
    with pytest.raises((ValueError, TypeError)) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg and all(m in msg for m in match), msg
    return msg


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(-3, 3).filter(bool))
@example([2, 8], 1)  # one view more than the groups cover: it would be left out
@example([2, 8], -1)
def test_counts_that_do_not_add_up_are_one_line(counts, delta):
    n = sum(counts) + delta
    aug = ViewAugment([(c, [RandomGrayscale()]) for c in counts], seed=0)
    if n < 1:
        return
    one_line_error(lambda: aug(views_of([8] * n, 2)), f"cover {sum(counts)} views", f"has {n}")


def test_bad_views_and_groups_are_one_line_errors():
    aug = ViewAugment.dino(2, seed=0)
    good = views_of([16, 16, 8, 8], 2)
    one_line_error(lambda: aug(good[0]), "list of views", "GpuAugment")
    one_line_error(lambda: aug([*good, good[3]]), "cover 4 views", "has 5")
    one_line_error(lambda: aug([*good[:3], good[3].permute(0, 2, 3, 1)]), "view 3", "[B, 3, H, W]")
    one_line_error(lambda: aug([*good[:3], good[3].int()]), "view 3", "torch.int32")
    one_line_error(lambda: aug([*good[:3], good[3][:1]]), "view 3", "batch size 1")
    one_line_error(lambda: aug([*good[:3], "x"]), "view 3", "str")
    one_line_error(lambda: ViewOps(0, []), "count")
    one_line_error(lambda: ViewOps(2, [], overrides={2: []}), "override index", "[0, 2)")
    one_line_error(lambda: ViewOps(2, [MixUp(3)]), "MixUp")
    one_line_error(lambda: ViewOps(2, ["blur"]), "ops")
    one_line_error(lambda: ViewAugment([]), "non-empty")
    one_line_error(lambda: ViewAugment([(2, [], 3)]), "(count, ops)")
    one_line_error(lambda: GpuAugment([MixUp(3)])(good, torch.tensor([0, 1])), "MixUp")
    one_line_error(lambda: RandomSolarize(1.5), "threshold")
    with pytest.raises(IndexError):
        aug.recipe_of(4)


def test_the_prefetcher_hands_the_views_to_view_augment(tmp_path):
    """End to end on CPU: load(views=...) -> DevicePrefetcher(transform=ViewAugment) -> normalised float views."""
    import shardkit
    from shardkit.loader.prefetch import DevicePrefetcher
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path), num_samples=12, shard_size=5)
    views = [shardkit.View(32, (0.4, 1.0), count=2), shardkit.View(16, (0.05, 0.4), count=3)]
    loader = shardkit.load(ds.url, views=views, batch_size=4, num_workers=0, seed=0)
    seen = 0
    for out, labels in DevicePrefetcher(loader, "cpu", transform=ViewAugment.dino(3, seed=0)):
        assert [tuple(v.shape[1:]) for v in out] == [(3, 32, 32)] * 2 + [(3, 16, 16)] * 3
        assert all(v.dtype == torch.float32 and v.shape[0] == labels.shape[0] for v in out)
        assert all(float(v.min()) < -0.5 for v in out)  # normalised, not in [0, 1]
        seen += labels.shape[0]
    assert seen == 12


def test_compile_reaches_the_views(monkeypatch):
    """compile=True: every recipe's (concatenated) views run through its compiled step (aot_eager keeps inductor's C++
    build out of the test), with the eager values."""
    import functools

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    try:
        views = views_of([8, 8, 8], 3)
        groups = [ViewOps(3, [ColorJitter(0.4, 0.4), RandomSolarize(p=0.5)], overrides={2: [RandomGrayscale(0.5)]})]
        aug = ViewAugment(groups, seed=2, compile=True)
        got = aug(views)
        exp = ViewAugment(groups, seed=2)(views)
        assert all(p._compiled is not None for p in aug.pipelines)
        assert all(torch.allclose(g, e, atol=1e-5) for g, e in zip(got, exp))
    finally:
        torch._dynamo.reset()
