"""examples/train_dino.py: it trains on shardkit's views (a short run on sample data), and its DINO parts -- the loss,
the centre, the EMA teacher, the multi-crop wrapper, one step -- match deliberately simple references.

The mutant gate (``tests/mutants/dino_example.py``) plants the bugs these tests must catch.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.examples import load_script, run_script
from tests.support.repo import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "train_dino.py")
TIMEOUT = 120
FAST = settings(derandomize=True, deadline=None, max_examples=25)


dino = load_script(EXAMPLE, "train_dino_example")


# ----------------------------------------------------------------------------- the example runs and trains


@pytest.mark.timeout(TIMEOUT)
def test_dino_example_trains_on_sample_data(tmp_path):
    args = [
        "--workdir",
        str(tmp_path / "demo"),
        "--demo-images",
        "32",
        "--steps",
        "6",
        "--batch-size",
        "8",
        "--workers",
        "1",
        "--global-size",
        "32",
        "--local-size",
        "16",
        "--local-crops",
        "2",
        "--log-every",
        "2",
    ]
    proc = run_script(EXAMPLE, args, cwd=str(tmp_path), timeout=TIMEOUT)
    logged = [(int(s), float(x)) for s, x in re.findall(r"step (\d+)/6 \(epoch \d+\): loss (\S+),", proc.stdout)]
    assert [s for s, _ in logged] == [2, 4, 6], proc.stdout
    m = re.search(r"done: (\d+) steps, (\d+) images, (\d+) views per image, loss (\S+) -> (\S+)", proc.stdout)
    assert m, proc.stdout
    assert (int(m.group(1)), int(m.group(2)), int(m.group(3))) == (6, 48, 4)  # every step a full batch of 8
    assert all(math.isfinite(x) for _, x in logged) and math.isfinite(float(m.group(4)))
    assert float(m.group(5)) == logged[-1][1]


# ----------------------------------------------------------------------------- oracles of the DINO parts


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def reference_loss(student, teacher, center, views, n_global, t_s, t_t) -> float:
    """DINO's loss written out: per sample, per (global view i, any view v != i) pair, -sum(q log p); mean, mean."""
    b = len(student) // views
    pairs = []
    for i in range(n_global):
        for v in range(views):
            if v == i:
                continue
            per_sample = []
            for r in range(b):
                q = _softmax((teacher[i * b + r] - center[0]) / t_t)
                p = _softmax(student[v * b + r] / t_s)
                per_sample.append(-float(np.sum(q * np.log(p))))
            pairs.append(sum(per_sample) / b)
    return sum(pairs) / len(pairs)


@FAST
@given(
    batch=st.integers(1, 3),
    dim=st.integers(2, 6),
    local=st.integers(0, 3),
    n_global=st.integers(1, 2),
    t_s=st.sampled_from([0.1, 0.2, 0.5]),
    t_t=st.sampled_from([0.04, 0.07, 0.3]),
    seed=st.integers(0, 2**16),
)
@example(batch=2, dim=3, local=2, n_global=2, t_s=0.1, t_t=0.04, seed=1)  # DINO's shape: 2 global views, temps
def test_dino_loss_matches_the_written_out_reference(batch, dim, local, n_global, t_s, t_t, seed):
    views = n_global + local
    if views < 2:
        local, views = 1, n_global + 1
    rng = np.random.default_rng(seed)
    student = rng.uniform(-1, 1, (views * batch, dim))
    teacher = rng.uniform(-1, 1, (n_global * batch, dim))
    center = rng.uniform(-0.5, 0.5, (1, dim))
    got = dino.dino_loss(
        torch.from_numpy(student),
        torch.from_numpy(teacher),
        torch.from_numpy(center),
        num_views=views,
        student_temp=t_s,
        teacher_temp=t_t,
    )
    want = reference_loss(student, teacher, center, views, n_global, t_s, t_t)
    assert float(got) == pytest.approx(want, rel=1e-9, abs=1e-9)


@FAST
@given(momentum=st.floats(0.5, 0.999), seed=st.integers(0, 2**16))
@example(momentum=0.9, seed=0)
def test_teacher_and_centre_are_exponential_moving_averages(momentum, seed):
    torch.manual_seed(seed)
    student, teacher = nn.Linear(4, 3), nn.Linear(4, 3)
    want = [
        momentum * t.detach().clone() + (1 - momentum) * s.detach()
        for s, t in zip(student.parameters(), teacher.parameters())
    ]
    dino.update_teacher(student, teacher, momentum)
    for got, w in zip(teacher.parameters(), want):
        torch.testing.assert_close(got.detach(), w)
    center, out = torch.randn(1, 5), torch.randn(6, 5)
    want_c = momentum * center + (1 - momentum) * out.mean(0, keepdim=True)
    dino.update_center(center, out, momentum)
    torch.testing.assert_close(center, want_c)


def _small_nets(out_dim: int = 16):
    torch.manual_seed(0)
    student = dino.MultiCrop(dino.tiny_cnn(32), dino.DINOHead(32, out_dim, hidden=32, bottleneck=8))
    teacher = dino.MultiCrop(dino.tiny_cnn(32), dino.DINOHead(32, out_dim, hidden=32, bottleneck=8))
    return student, teacher.requires_grad_(False)


def _views(batch: int, local: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(batch, 3, 32, 32, generator=g) for _ in range(2)] + [
        torch.randn(batch, 3, 16, 16, generator=g) for _ in range(local)
    ]


def test_multicrop_wrapper_equals_one_view_at_a_time():
    student, _ = _small_nets()
    views = _views(3, 4)
    got = student(views)
    want = torch.cat([student.head(student.backbone(v)) for v in views])  # GroupNorm: per sample, order is all
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_step_feeds_the_teacher_global_views_only_and_updates_teacher_and_centre():
    student, teacher = _small_nets()
    views = _views(2, 3)
    seen: dict[str, list[tuple[int, ...]]] = {"student": [], "teacher": []}
    for name, net in (("student", student), ("teacher", teacher)):
        net.backbone.register_forward_pre_hook(lambda _m, a, name=name: seen[name].append(tuple(a[0].shape)))
    with torch.no_grad():
        teacher_out = torch.cat([teacher.head(teacher.backbone(v)) for v in views[:2]])
    before = [p.detach().clone() for p in teacher.parameters()]
    center = torch.randn(1, 16)
    want_center = 0.9 * center + 0.1 * teacher_out.mean(0, keepdim=True)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    seen["teacher"].clear()
    loss = dino.train_step(student, teacher, center, views, opt, momentum=0.9, center_momentum=0.9)
    assert math.isfinite(loss)
    assert seen["teacher"] == [(4, 3, 32, 32)]  # both global views, one backbone call, never a local view
    assert seen["student"] == [(4, 3, 32, 32), (6, 3, 16, 16)]  # every view, grouped by size
    for b, t, s in zip(before, teacher.parameters(), student.parameters()):
        assert t.grad is None and not t.requires_grad
        torch.testing.assert_close(t.detach(), 0.9 * b + 0.1 * s.detach())  # EMA of the student after its update
    torch.testing.assert_close(center, want_center, rtol=1e-5, atol=1e-6)


def test_teacher_momentum_goes_from_base_to_one():
    ms = [dino.teacher_momentum(k, 10, 0.996) for k in range(11)]
    assert ms[0] == pytest.approx(0.996) and ms[-1] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(ms, ms[1:]))
