"""The scheduler examples: Ray tasks + merge (run on a local Ray cluster), a Slurm array script, a Kubernetes Indexed Job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.demo.sampledata import make_imagefolder
from tests.support.data import tree_digests
from tests.support.repo import ROOT as REPO

EXAMPLES = os.path.join(REPO, "examples")
OPTS = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=3, seed=1)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    src = make_imagefolder(str(tmp_path_factory.mktemp("src") / "if"), num_classes=2, per_class=5, seed=4)
    dest = str(tmp_path_factory.mktemp("single") / "ds")
    convert(src, dest, OPTS, workers=1, quiet=True)
    return src, dest


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ray_tasks_then_merge_equal_a_single_task_run(single, tmp_path):
    ray = pytest.importorskip("ray")
    src, expected = single
    from examples import convert_ray  # the repository root is on sys.path (pytest's rootdir)

    path = os.pathsep.join([REPO, EXAMPLES, os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}}, log_to_driver=False)
    try:
        manifests = convert_ray.convert_with_ray(src, str(tmp_path / "ray"), OPTS, num_tasks=3)
    finally:
        ray.shutdown()
    assert sum(m.num_samples for m in manifests) == 10
    assert tree_digests(str(tmp_path / "ray")) == tree_digests(expected)


def test_slurm_script_syntax_and_a_two_task_array_run_by_hand(single, tmp_path):
    script = os.path.join(EXAMPLES, "slurm_convert.sh")
    subprocess.run(["bash", "-n", script], check=True)
    src, expected = single
    dest = str(tmp_path / "slurm")
    env = {**os.environ, "SHARDKIT": f"{sys.executable} -m shardkit", "SLURM_ARRAY_TASK_COUNT": "2", "PYTHONPATH": REPO}
    for i in ("1", "0"):  # what the array's two tasks run, in any order
        subprocess.run(
            ["bash", script, src, dest, "--short-side", "16", "--shard-size", "3", "--seed", "1"],
            env={**env, "SLURM_ARRAY_TASK_ID": i},
            check=True,
            timeout=120,
        )
    subprocess.run(
        [sys.executable, "-m", "shardkit", "merge", dest], env=env, check=True, timeout=120, stdout=subprocess.DEVNULL
    )
    assert tree_digests(dest) == tree_digests(expected)


def test_k8s_indexed_job_loads_and_runs_the_task_of_its_index():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(EXAMPLES, "k8s_convert.yaml")) as f:
        docs = list(yaml.safe_load_all(f))
    (job,) = docs
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    cmd = " ".join(spec["template"]["spec"]["containers"][0]["args"])
    assert f"--num-tasks {spec['completions']}" in cmd and '--task-index "$JOB_COMPLETION_INDEX"' in cmd
    with open(os.path.join(EXAMPLES, "k8s_convert.yaml")) as f:
        assert "shardkit merge" in f.read()
