"""GpuAugment ops against torchvision.transforms.v2.functional, fusion, dtypes, formats, seeds.

Every op is checked with the per-sample parameters the pipeline drew: sample
``b`` of the batch must equal torchvision's functional op on image ``b`` with
those parameters. Runs on CPU; the ``device`` fixture adds CUDA when present.
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as F
from torchvision.transforms import InterpolationMode

from shardkit.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CenterCrop,
    ColorJitter,
    CutMix,
    GaussianBlur,
    GpuAugment,
    HorizontalFlip,
    MixUp,
    Normalize,
    RandomAffine,
    RandomErasing,
    RandomGrayscale,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    VerticalFlip,
)
from tests.support.augment import uint8_images

BILINEAR = InterpolationMode.BILINEAR
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


def smooth_images(b: int, h: int, w: int, seed: int = 0, freq: float = 1.0) -> torch.Tensor:
    """uint8 [b, 3, h, w] low-frequency images (bilinear resampling is accurate on them)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    out = torch.zeros(b, 3, h, w)
    for _ in range(3):
        fx, fy, ph = torch.rand(3, b, 3, 1, 1, generator=g)
        out += torch.sin(freq * (xx * (0.05 + 0.25 * fx) + yy * (0.05 + 0.25 * fy)) + 6 * ph)
    return ((out / 6 + 0.5) * 255).round().clamp(0, 255).to(torch.uint8)


def noise_images(b: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    x = uint8_images(b, (h, w), seed)
    x[0, :, :4] = 77  # grey pixels
    x[-1, 1] = x[-1, 0]  # channel ties
    return x


def run(ops, x: torch.Tensor, device: torch.device, seed: int = 1, **kw):
    """(output float32 on cpu, per-sample params of op 0 on cpu)."""
    aug = GpuAugment(ops, seed=seed, **kw)
    x = x.to(device)
    params = aug.sample_params(x.shape[0], tuple(x.shape[-2:]), device)
    out, _ = aug.apply(x, params)
    return out.float().cpu(), [{k: v.cpu() for k, v in p.items()} for p in params]


def per_sample(params: dict, b: int) -> dict:
    return {k: v[b] for k, v in params.items()}


def to_float(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255.0


def inside(ref_ones: torch.Tensor) -> torch.Tensor:
    """Pixels whose 4 bilinear neighbours all lie inside the source image."""
    return ref_ones > 1 - 1e-6


# --- geometric ops -----------------------------------------------------------


def test_resized_crop_matches_torchvision(device):
    x = smooth_images(8, 40, 48)
    out, params = run([RandomResizedCrop((24, 32), scale=(0.2, 1.0))], x, device)
    for b in range(8):
        p = per_sample(params[0], b)
        box = [int(p[k]) for k in ("top", "left", "height", "width")]
        ref = F.resized_crop(to_float(x[b]), *box, [24, 32], interpolation=BILINEAR, antialias=False)
        # torchvision clamps at the crop box, the fused pass may read the pixel just outside it:
        # identical inside, under half a pixel step on the outermost output row/column
        assert (out[b, :, 1:-1, 1:-1] - ref[:, 1:-1, 1:-1]).abs().max() < 1e-4
        assert (out[b] - ref).abs().mean() < 1 / 255


@pytest.mark.parametrize("horizontal", [True, False])
def test_flips_match_torchvision(device, horizontal):
    x = smooth_images(16, 12, 10)
    op, fn = (HorizontalFlip(0.5), F.horizontal_flip) if horizontal else (VerticalFlip(0.5), F.vertical_flip)
    out, params = run([op], x, device)
    flips = params[0]["flip"]
    assert 0 < int(flips.sum()) < 16
    for b in range(16):
        ref = fn(to_float(x[b])) if flips[b] else to_float(x[b])
        assert (out[b] - ref).abs().max() < 1e-5


def test_rotation_matches_torchvision(device):
    x = smooth_images(6, 36, 44)
    fill = (10, 100, 200)
    out, params = run([RandomRotation(40, fill=fill)], x, device)
    for b in range(6):
        angle = float(params[0]["angle"][b])
        ref = F.rotate(to_float(x[b]), angle, interpolation=BILINEAR, fill=[f / 255 for f in fill])
        ones = F.rotate(torch.ones(1, 36, 44), angle, interpolation=BILINEAR, fill=0.0)
        m = inside(ones).expand_as(ref)
        assert (out[b][m] - ref[m]).abs().max() < 1e-4
        far = (ones == 0).expand_as(ref)
        assert torch.allclose(out[b][far], ref[far], atol=1e-5)  # the fill colour
        assert (out[b] - ref).abs().mean() < 2 / 255


def test_affine_matches_torchvision(device):
    x = smooth_images(6, 36, 44)
    op = RandomAffine(30, translate=(0.2, 0.1), scale=(0.7, 1.3), shear=(-10, 10, -5, 5))
    out, params = run([op], x, device)
    for b in range(6):
        p = per_sample(params[0], b)
        args = (
            float(p["angle"]),
            [float(p["translate_x"]), float(p["translate_y"])],
            float(p["scale"]),
            [float(p["shear_x"]), float(p["shear_y"])],
        )
        ref = F.affine(to_float(x[b]), *args, interpolation=BILINEAR)
        ones = F.affine(torch.ones(1, 36, 44), *args, interpolation=BILINEAR)
        m = inside(ones).expand_as(ref)
        assert m.any()
        assert (out[b][m] - ref[m]).abs().max() < 1e-4
        assert (out[b] - ref).abs().mean() < 2 / 255
        assert float(p["translate_x"]).is_integer()  # torchvision rounds translations


def test_resize_and_center_crop_match_torchvision(device):
    x = smooth_images(3, 30, 40)
    out, _ = run([Resize(24)], x, device)
    assert out.shape[-2:] == (24, 32)
    ref = F.resize(to_float(x), [24], interpolation=BILINEAR, antialias=False)
    assert (out - ref).abs().max() < 1e-4
    out, _ = run([CenterCrop((20, 25))], x, device)
    assert (out - F.center_crop(to_float(x), [20, 25])).abs().max() < 1e-6


# --- pixel ops ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name,op,fn",
    [
        ("brightness", ColorJitter(brightness=0.6), F.adjust_brightness),
        ("contrast", ColorJitter(contrast=0.6), F.adjust_contrast),
        ("saturation", ColorJitter(saturation=0.9), F.adjust_saturation),
        ("hue", ColorJitter(hue=0.5), F.adjust_hue),
    ],
)
def test_color_adjustments_match_torchvision(device, name, op, fn):
    x = noise_images(6, 10, 12)
    out, params = run([op], x, device)
    factors = params[0][name]
    assert len(set(factors.tolist())) == 6  # per-sample factors
    for b in range(6):
        assert (out[b] - fn(to_float(x[b]), float(factors[b]))).abs().max() < 1e-5


@pytest.mark.parametrize("order", ["fixed", "random"])
def test_color_jitter_order(device, order):
    x = noise_images(6, 10, 12)
    out, params = run([ColorJitter(0.4, 0.4, 0.4, 0.2, order=order)], x, device)
    names = ["brightness", "contrast", "saturation", "hue"]
    fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    for b in range(6):
        perm = params[0]["order"][b].tolist() if order == "random" else [0, 1, 2, 3]
        ref = to_float(x[b])
        for i in perm:
            ref = fns[i](ref, float(params[0][names[i]][b]))
        assert (out[b] - ref).abs().max() < 1e-5


def test_color_jitter_probability_keeps_unselected_samples(device):
    x = noise_images(32, 4, 4)
    out, params = run([ColorJitter(0.5, 0.5, 0.5, 0.1, p=0.5)], x, device)
    same = (params[0]["brightness"] == 1) & (params[0]["hue"] == 0)
    assert 0 < int(same.sum()) < 32
    assert (out[same] - to_float(x)[same]).abs().max() < 1e-5


def test_grayscale_normalize_blur_erase_match_torchvision(device):
    x = noise_images(8, 16, 18)
    out, params = run([RandomGrayscale(0.5)], x, device)
    for b in range(8):
        ref = F.rgb_to_grayscale(to_float(x[b]), 3) if params[0]["apply"][b] else to_float(x[b])
        assert (out[b] - ref).abs().max() < 1e-6

    out, _ = run([Normalize(IMAGENET_MEAN, IMAGENET_STD)], x, device)
    assert (out - F.normalize(to_float(x), list(IMAGENET_MEAN), list(IMAGENET_STD))).abs().max() < 1e-5

    out, params = run([GaussianBlur((5, 3), (0.1, 2.0))], x, device)
    for b in range(8):
        sigma = float(params[0]["sigma"][b])
        assert (out[b] - F.gaussian_blur(to_float(x[b]), [5, 3], [sigma, sigma])).abs().max() < 1e-5

    x = noise_images(16, 16, 18)
    out, params = run([RandomErasing(p=0.5, value=(0.1, 0.5, 0.9))], x, device)
    erased = 0
    for b in range(16):
        p = per_sample(params[0], b)
        ref = to_float(x[b])
        if p["height"] > 0:
            erased += 1
            v = torch.tensor([0.1, 0.5, 0.9]).view(3, 1, 1).expand(3, int(p["height"]), int(p["width"]))
            ref = F.erase(ref, int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"]), v)
        assert (out[b] - ref).abs().max() < 1e-6
    assert 0 < erased < 16


# --- mix ops -----------------------------------------------------------------


@pytest.mark.parametrize("per_sample", [False, True])
def test_mixup_cutmix_labels(device, per_sample):
    x = noise_images(8, 12, 16).to(device)
    labels = torch.arange(8, device=device) % 5
    for op in (MixUp(5, alpha=0.8, per_sample=per_sample), CutMix(5, alpha=1.0, per_sample=per_sample)):
        aug = GpuAugment([op], seed=2)
        params = aug.sample_params(8, (12, 16), device)
        out, soft = aug.apply(x, params, labels)
        assert soft.shape == (8, 5) and soft.dtype == torch.float32
        assert torch.allclose(soft.sum(1), torch.ones(8, device=device))
        lam = params[0]["lam"]
        if not per_sample:
            assert torch.all(lam == lam[0])
        xf, prev = to_float(x), to_float(x).roll(1, 0)
        if isinstance(op, MixUp):
            ref = lam.view(-1, 1, 1, 1) * xf + (1 - lam.view(-1, 1, 1, 1)) * prev
            assert (out - ref).abs().max() < 1e-5
        else:
            pasted = (
                ((out - xf).abs() > 1e-6).any(1).float().mean((1, 2))
            )  # fraction of pixels taken from the neighbour
            assert torch.all(pasted <= 1 - lam + 1e-6)
            for b in range(8):
                t, l_, h, w = (int(params[0][k][b]) for k in ("top", "left", "height", "width"))
                if h * w == 0:  # lam this close to 1 pastes nothing (as in torchvision)
                    continue
                assert (out[b, :, t : t + h, l_ : l_ + w] - prev[b, :, t : t + h, l_ : l_ + w]).abs().max() < 1e-6
            assert torch.allclose(lam, 1 - params[0]["height"] * params[0]["width"] / (12 * 16))
        onehot = torch.nn.functional.one_hot(labels, 5).float()
        assert torch.allclose(soft, lam.view(-1, 1) * onehot + (1 - lam.view(-1, 1)) * onehot.roll(1, 0))


def test_mix_needs_labels():
    aug = GpuAugment([MixUp(3)], seed=0)
    with pytest.raises(ValueError, match="labels"):
        aug(torch.zeros(2, 3, 4, 4, dtype=torch.uint8))
    assert aug.needs_labels


# --- fusion ------------------------------------------------------------------

GEOMETRIC_CHAIN = [
    RandomResizedCrop((28, 28), scale=(0.3, 1.0)),
    HorizontalFlip(0.5),
    RandomRotation(25),
    RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5),
]


def test_fused_equals_sequential_torchvision(device):
    x = smooth_images(6, 40, 44, freq=0.5)
    out, params = run(GEOMETRIC_CHAIN, x, device)
    for b in range(6):
        c, f, r, a = (per_sample(p, b) for p in params)

        def chain(img, c=c, f=f, r=r, a=a):
            img = F.resized_crop(
                img, *(int(c[k]) for k in ("top", "left", "height", "width")), [28, 28], antialias=False
            )
            img = F.horizontal_flip(img) if f["flip"] else img
            img = F.rotate(img, float(r["angle"]), interpolation=BILINEAR)
            return F.affine(
                img,
                float(a["angle"]),
                [float(a["translate_x"]), float(a["translate_y"])],
                float(a["scale"]),
                [float(a["shear_x"]), 0.0],
                interpolation=BILINEAR,
            )

        ref, ones = chain(to_float(x[b])), chain(torch.ones(1, 40, 44))
        m = inside(ones).expand_as(ref)
        # one resampling instead of three: close, not equal (the gap is the blur
        # of repeated bilinear interpolation, it shrinks with the image frequency)
        assert (out[b][m] - ref[m]).abs().mean() < 0.5 / 255
        assert (out[b] - ref).abs().mean() < 3 / 255


def test_fused_equals_own_sequential_passes(device):
    """An identity pixel op between geometric ops splits the fused pass."""
    x = smooth_images(6, 40, 44).to(device)
    identity = Normalize((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    fused = GpuAugment(GEOMETRIC_CHAIN, seed=5)
    split = GpuAugment(
        [GEOMETRIC_CHAIN[0], identity, GEOMETRIC_CHAIN[1], identity, GEOMETRIC_CHAIN[2], identity, GEOMETRIC_CHAIN[3]],
        seed=5,
    )
    params = fused.sample_params(6, (40, 44), device)
    split_params = [params[0], {}, params[1], {}, params[2], {}, params[3]]
    a, _ = fused.apply(x, params)
    b, _ = split.apply(x, split_params)
    ones = split.apply(torch.full_like(x, 255), split_params)[0]
    m = inside(ones)
    assert (a[m] - b[m]).abs().mean() < 1 / 255
    assert ((a - b).abs() > 0.5).float().mean() < 0.01  # the filled areas coincide


def test_extend_mode_fills_less(device):
    x = torch.full((8, 3, 40, 40), 200, dtype=torch.uint8, device=device)
    ops = [RandomResizedCrop(24, scale=(0.1, 0.2)), RandomRotation((30, 30))]
    clip = GpuAugment(ops, seed=0)(x)
    extend = GpuAugment(ops, seed=0, clip_intermediate=False)(x)
    assert (clip < 0.5).sum() > 0 and (extend < 0.5).sum() < (clip < 0.5).sum()


# --- pipeline behaviour ------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["contiguous", "channels_last"])
def test_dtype_and_memory_format(device, dtype, fmt):
    x = noise_images(4, 32, 36).to(device)
    aug = GpuAugment.imagenet_train(24, output_dtype=dtype, memory_format=fmt, seed=0)
    out = aug(x)
    assert out.dtype == dtype and out.shape == (4, 3, 24, 24) and out.device.type == device.type
    mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
    assert out.is_contiguous(memory_format=mf)
    ref = GpuAugment.imagenet_train(24, seed=0)(x)
    assert (out.float() - ref).abs().max() < 0.05


def test_normalisation_and_eval_preset(device):
    x = noise_images(4, 32, 32).to(device)
    out = GpuAugment.imagenet_eval(28, seed=0)(x)
    ref = F.normalize(F.center_crop(to_float(x), [28, 28]), list(IMAGENET_MEAN), list(IMAGENET_STD))
    assert (out - ref).abs().max() < 1e-5


def test_channels_last_input_gives_same_result(device):
    x = smooth_images(4, 32, 36).to(device)
    aug = GpuAugment(
        [
            RandomResizedCrop(20),
            HorizontalFlip(),
            RandomRotation(20),
            ColorJitter(0.3, 0.3, 0.3, 0.1),
            RandomGrayscale(0.3),
        ],
        seed=3,
    )
    a = aug(x)
    aug.manual_seed(3)
    b = aug(x.contiguous(memory_format=torch.channels_last))
    assert (a - b).abs().max() < 1e-5
    # a [B, H, W, 3] buffer seen through permute(0, 3, 1, 2)
    aug.manual_seed(3)
    c = aug(x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2))
    assert (a - c).abs().max() < 1e-5


def test_seed_reproducibility(device):
    x = noise_images(6, 24, 24).to(device)
    ops = [
        RandomResizedCrop(16),
        HorizontalFlip(),
        RandomRotation(20),
        ColorJitter(0.4, 0.4, 0.4, 0.1),
        RandomErasing(value="random"),
    ]
    a = GpuAugment(ops, seed=7)
    b = GpuAugment(ops, seed=7)
    c = GpuAugment(ops, seed=8)
    ya = a(x)
    assert torch.equal(ya, b(x))
    assert not torch.equal(ya, c(x))
    assert not torch.equal(a(x), ya)  # the stream moves on
    a.manual_seed(7)
    assert torch.equal(a(x), ya)


def test_half_compute_dtype_is_close(device):
    x = noise_images(4, 40, 40).to(device)
    ops = [
        RandomResizedCrop(32),
        HorizontalFlip(),
        RandomRotation(20, fill=5),
        ColorJitter(0.4, 0.4, 0.4, 0.1),
        RandomGrayscale(0.3),
        GaussianBlur(3),
        RandomErasing(value=(1, 2, 3)),
    ]
    ref = GpuAugment(ops, seed=0)(x)
    half = GpuAugment(ops, seed=0, compute_dtype=torch.float16)(x)
    assert half.dtype == torch.float32
    assert (half - ref).abs().mean() < 0.2 / 255 and (half - ref).abs().max() < 3 / 255


def test_float_input_is_not_modified(device):
    x = to_float(noise_images(2, 8, 8)).to(device)
    before = x.clone()
    GpuAugment([ColorJitter(0.5, 0.5), Normalize(IMAGENET_MEAN, IMAGENET_STD)], seed=0)(x)
    assert torch.equal(x, before)


def test_apply_traces_without_graph_breaks():
    """fullgraph tracing fails on .item(), data-dependent Python branches and
    dynamic shapes, i.e. on anything that would synchronise with the host."""
    x = noise_images(4, 24, 24)
    ops = [
        RandomResizedCrop(16),
        HorizontalFlip(),
        RandomRotation(20, fill=3),
        ColorJitter(0.4, 0.4, 0.4, 0.1),
        RandomGrayscale(0.2),
        GaussianBlur(3),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
        RandomErasing(),
        MixUp(4),
        CutMix(4),
    ]
    aug = GpuAugment(ops, seed=0, output_dtype=torch.bfloat16, memory_format="channels_last")
    params = aug.sample_params(4, (24, 24), "cpu")
    labels = torch.tensor([0, 1, 2, 3])
    torch._dynamo.reset()
    compiled = torch.compile(aug.apply, backend="eager", fullgraph=True, dynamic=False)
    a, la = compiled(x, params, labels)
    b, lb = aug.apply(x, params, labels)
    assert torch.equal(a, b) and torch.equal(la, lb)


def test_uniform_to_params_traces_without_graph_breaks():
    """The per-sample parameter maths (everything but the generator draws) has no
    host sync either: e.g. RandomResizedCrop's 10-attempt rejection sampling.
    (The generator draws: tests/augment/test_no_sync.py.)"""
    ops = [
        RandomResizedCrop(16),
        HorizontalFlip(),
        RandomRotation(20),
        RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5),
        ColorJitter(0.4, 0.4, 0.4, 0.1, order="random"),
        RandomGrayscale(0.2),
        GaussianBlur(3),
        RandomErasing(),
    ]
    sizes = [(24, 24)] + [(16, 16)] * (len(ops) - 1)
    gen = torch.Generator().manual_seed(0)
    widths = [op.num_uniforms() for op in ops]

    def sample(u):
        out, off = [], 0
        for op, size, n in zip(ops, sizes, widths):
            out.append(op.sample(u[:, off : off + n], size, gen))
            off += n
        return out

    u = torch.rand(8, sum(widths), generator=gen)
    torch._dynamo.reset()
    traced = torch.compile(sample, backend="eager", fullgraph=True)(u)
    for a, b in zip(traced, sample(u)):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_no_host_sync_on_cuda():
    x = noise_images(8, 64, 64).cuda()
    ops = [
        RandomResizedCrop(48),
        HorizontalFlip(),
        RandomRotation(20),
        ColorJitter(0.4, 0.4, 0.4, 0.1),
        RandomGrayscale(0.2),
        GaussianBlur(3),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
        RandomErasing(),
        MixUp(4),
        CutMix(4),
    ]
    aug = GpuAugment(ops, seed=0, output_dtype=torch.bfloat16, memory_format="channels_last")
    labels = torch.arange(8, device="cuda") % 4
    aug(x, labels)  # first call creates cached constants and the generator
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            aug(x, labels)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_option_validation():
    with pytest.raises(ValueError, match="output_dtype"):
        GpuAugment([], output_dtype=torch.int8)
    with pytest.raises(ValueError, match="contiguous"):
        GpuAugment([], memory_format="nhwc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fixed"):
        ColorJitter(0.1, order="shuffled")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="probability"):
        HorizontalFlip(1.5)
    with pytest.raises(ValueError, match="hue"):
        ColorJitter(hue=0.7)
    with pytest.raises(ValueError, match="images"):
        GpuAugment([HorizontalFlip()])(torch.zeros(2, 4, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="does not fit"):
        GpuAugment([CenterCrop(10)])(torch.zeros(1, 3, 8, 8, dtype=torch.uint8))
