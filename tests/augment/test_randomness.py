"""Per-sample randomness of GpuAugment: independence and the requested distributions."""

from __future__ import annotations

import math

import pytest
import torch
from torchvision.transforms import v2

from shardkit.augment import (
    ColorJitter,
    CutMix,
    GaussianBlur,
    GpuAugment,
    HorizontalFlip,
    MixUp,
    RandomAffine,
    RandomErasing,
    RandomGrayscale,
    RandomResizedCrop,
    RandomRotation,
)

B = 512
SIZE = (64, 80)


def draw(ops, batches: int = 1, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Parameters of every op over ``batches`` batches, concatenated."""
    aug = GpuAugment(ops, seed=seed)
    runs = [aug.sample_params(B, SIZE, "cpu") for _ in range(batches)]
    return [{k: torch.cat([r[i][k] for r in runs]) for k in runs[0][i]} for i in range(len(ops))]


def within(rate: float, p: float, n: int, sigmas: float = 5.0) -> bool:
    return abs(rate - p) <= sigmas * math.sqrt(p * (1 - p) / n) + 1e-9


def test_flip_rate_and_independence():
    flips = draw([HorizontalFlip(0.3)], batches=8)[0]["flip"].view(8, B)
    assert within(flips.float().mean().item(), 0.3, flips.numel())
    assert all(0 < int(row.sum()) < B for row in flips)  # both outcomes inside every batch
    # consecutive samples are uncorrelated
    a, b = flips[:, :-1].float().flatten(), flips[:, 1:].float().flatten()
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.05
    assert not torch.equal(flips[0], flips[1])  # batches differ


def test_angles_cover_range_uniformly():
    angle = draw([RandomRotation((-10, 30))], batches=4)[0]["angle"]
    assert angle.min() >= -10 and angle.max() <= 30
    assert angle.min() < -9.5 and angle.max() > 29.5
    assert abs(angle.mean().item() - 10) < 1.0
    assert abs(angle.std().item() - 40 / math.sqrt(12)) < 0.5
    assert angle.unique().numel() == angle.numel()  # every sample its own angle


def test_affine_parameter_ranges():
    p = draw([RandomAffine(15, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(-5, 5, -3, 3))])[0]
    assert p["angle"].abs().max() <= 15 and p["scale"].min() >= 0.8 and p["scale"].max() <= 1.2
    assert p["translate_x"].abs().max() <= round(0.1 * SIZE[1]) and p["translate_y"].abs().max() <= round(0.2 * SIZE[0])
    assert torch.equal(p["translate_x"], p["translate_x"].round())
    assert p["shear_x"].abs().max() <= 5 and p["shear_y"].abs().max() <= 3


def test_resized_crop_boxes_follow_torchvision():
    p = draw([RandomResizedCrop(32, scale=(0.1, 0.9), ratio=(0.5, 2.0))], batches=2)[0]
    top, left, h, w = p["top"], p["left"], p["height"], p["width"]
    assert torch.all(top >= 0) and torch.all(left >= 0)
    assert torch.all(top + h <= SIZE[0]) and torch.all(left + w <= SIZE[1])
    area = h * w / (SIZE[0] * SIZE[1])
    assert area.min() > 0.09 and area.max() < 0.91
    # compare with torchvision's own sampler (one box per call)
    torch.manual_seed(0)
    img = torch.zeros(3, *SIZE)
    ref = torch.tensor(
        [v2.RandomResizedCrop.get_params(img, [0.1, 0.9], [0.5, 2.0])[2:] for _ in range(2000)], dtype=torch.float32
    )
    ref_area = ref[:, 0] * ref[:, 1] / (SIZE[0] * SIZE[1])
    assert abs(area.mean() - ref_area.mean()) < 0.03
    assert abs((w / h).log().mean() - (ref[:, 1] / ref[:, 0]).log().mean()) < 0.06
    # positions spread over the whole image
    assert top.float().std() > 3 and left.float().std() > 3


def test_color_factors_independent_and_in_range():
    p = draw([ColorJitter(0.4, (0.5, 1.5), 0.2, 0.1)])[0]
    assert p["brightness"].min() >= 0.6 and p["brightness"].max() <= 1.4
    assert p["contrast"].min() >= 0.5 and p["contrast"].max() <= 1.5
    assert p["hue"].abs().max() <= 0.1
    stacked = torch.stack([p[k] for k in ("brightness", "contrast", "saturation", "hue")])
    corr = torch.corrcoef(stacked)
    assert (corr - torch.eye(4)).abs().max() < 0.15
    assert p["brightness"].unique().numel() == B


def test_random_order_permutations_are_uniform():
    order = draw([ColorJitter(0.1, 0.1, 0.1, 0.1, order="random")], batches=4)[0]["order"]
    assert torch.all(order.sort(dim=1).values == torch.arange(4))
    first = torch.bincount(order[:, 0], minlength=4).float() / order.shape[0]
    assert (first - 0.25).abs().max() < 0.04


def test_probabilities_of_pixel_ops():
    gray, blur, erase = draw(
        [RandomGrayscale(0.2), GaussianBlur(3, (0.5, 1.0), p=0.4), RandomErasing(p=0.6)], batches=4
    )
    assert within(gray["apply"].float().mean().item(), 0.2, 4 * B)
    assert within((blur["sigma"] >= 0.5).float().mean().item(), 0.4, 4 * B)
    # torchvision skips erasing when no box fits in 10 attempts: rate slightly below p
    rate = (erase["height"] > 0).float().mean().item()
    assert 0.5 < rate <= 0.6 + 5 * math.sqrt(0.24 / (4 * B))


def test_mix_lambda_distribution():
    lam = torch.cat([draw([MixUp(10, alpha=0.4)], seed=s)[0]["lam"][:1] for s in range(300)])
    # Beta(0.4, 0.4): mean 0.5, variance 1 / (4 * (2 * 0.4 + 1)) = 0.139
    assert abs(lam.mean().item() - 0.5) < 0.07
    assert abs(lam.var().item() - 0.139) < 0.04
    per = draw([CutMix(10, per_sample=True)])[0]["lam"]
    assert per.unique().numel() > B // 4 and per.min() >= 0 and per.max() <= 1


@pytest.mark.parametrize("alpha", [0.2, 1.0, 3.0])
def test_gamma_sampler_matches_numpys_gamma(alpha):
    """The public-API Marsaglia-Tsang sampler behind MixUp's Beta: quantiles and moments of Gamma(alpha)."""
    import numpy as np

    from shardkit.augment import params as P

    n = 100_000
    x = P.gamma(P.make_generator(3, "cpu"), alpha, (n,), torch.device("cpu")).numpy()
    ref = np.random.default_rng(3).gamma(alpha, size=n)
    qs = [0.05, 0.25, 0.5, 0.75, 0.95]
    assert np.allclose(np.quantile(x, qs), np.quantile(ref, qs), rtol=0.06, atol=2e-3)
    assert abs(x.mean() - alpha) < 5 * math.sqrt(alpha / n) and abs(x.var() / alpha - 1) < 0.05
    again = P.gamma(P.make_generator(3, "cpu"), alpha, (n,), torch.device("cpu")).numpy()
    assert np.array_equal(x, again) and (x > 0).all()
    with pytest.raises(ValueError, match="positive"):
        P.gamma(P.make_generator(3, "cpu"), 0.0, (2,), torch.device("cpu"))
