"""Data-parallel training on shardkit shards with torchrun; checkpoints and resumes mid-epoch.

Runs on CPU with gloo and on GPUs with NCCL, one process per device::

    shardkit convert path/to/imagefolder /data/ds        # writes /data/ds/train/
    torchrun --nproc-per-node 2 examples/train_ddp.py --data /data/ds/train --epochs 3 --checkpoint ckpt.pt

Every rank gets the same number of batches per epoch (so DDP never hangs at the
end of an epoch) and every sample is seen once per epoch. Kill the job at any
point and start the same command again: it resumes from the checkpoint in the
middle of the epoch, with the same or a different number of processes.

Test hooks (used by tests/system/test_distributed.py): ``--log-ids DIR`` writes the
sample keys of every step per rank (and the padding the loader reports), ``--stop-after N`` exits (as if preempted)
after N steps, having saved a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import shardkit
from shardkit.augment import IMAGENET_MEAN, IMAGENET_STD, ColorJitter, GpuAugment, Normalize
from shardkit.demo.run import small_cnn
from shardkit.loader.prefetch import DevicePrefetcher


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="split URL written by 'shardkit convert' (path, s3://...)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="", help="path to save to / resume from")
    p.add_argument("--save-every", type=int, default=0, help="also checkpoint every N steps")
    p.add_argument("--stop-after", type=int, default=0, help="exit after N steps in this run (simulated preemption)")
    p.add_argument("--log-ids", default="", help="directory: write the sample ids of each step, one JSON line per step")
    p.add_argument("--no-train", action="store_true", help="only iterate the data and all-reduce (fast checks)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)

    loader = shardkit.load(
        args.data,
        batch_size=args.batch_size,
        size=args.image_size,
        num_workers=args.workers,
        seed=args.seed,
        with_keys=bool(args.log_ids),
    )  # rank and world size come from torch.distributed
    num_classes = len(loader.dataset.manifest.classes)
    model = small_cnn(num_classes).to(device)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    # the loader already crops and flips while decoding; colour and normalisation run on the device
    augment = GpuAugment(
        [ColorJitter(0.3, 0.3, 0.3, 0.05), Normalize(IMAGENET_MEAN, IMAGENET_STD)], seed=args.seed + rank
    )

    start_epoch, step = 0, 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        loader.load_state_dict(ckpt["loader"])  # same or different world size
        start_epoch, step = loader.epoch, ckpt["step"]
        if rank == 0:
            print(f"resumed at epoch {start_epoch}, step {step} (world size {world})", flush=True)

    def save() -> None:
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict(), "step": step}
        if rank == 0:  # every rank has the same loader position: rank 0's state resumes all
            tmp = args.checkpoint + ".tmp"
            torch.save(state, tmp)
            os.replace(tmp, args.checkpoint)
        dist.barrier()

    log = open(os.path.join(args.log_ids, f"rank{rank}.jsonl"), "a") if args.log_ids else None
    steps_this_run = 0
    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)
        prefetcher = DevicePrefetcher(loader, device, transform=None)
        padded = loader.epoch_info.padded if log else 0  # samples repeated to even out the ranks this epoch
        t0, seen, correct, loss_sum = time.perf_counter(), 0, 0, 0.0
        for images, labels, *keys in prefetcher:
            if log:
                log.write(json.dumps({"epoch": epoch, "step": step, "keys": list(keys[0]), "padded": padded}) + "\n")
                log.flush()
            if args.no_train:
                flag = torch.ones(1, device=device)
                dist.all_reduce(flag)  # a collective per step: a rank with fewer batches would hang here
            else:
                x = augment(images)
                out = ddp(x)
                loss = F.cross_entropy(out, labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss_sum += float(loss) * len(labels)
                correct += int((out.argmax(1) == labels).sum())
            seen += len(labels)
            step += 1
            steps_this_run += 1
            if args.checkpoint and args.save_every and step % args.save_every == 0:
                save()
            if args.stop_after and steps_this_run >= args.stop_after:
                if args.checkpoint:
                    save()
                if log:
                    log.close()
                dist.destroy_process_group()
                return
        stats = torch.tensor([seen, correct, loss_sum], dtype=torch.float64, device=device)
        dist.all_reduce(stats)
        dt = time.perf_counter() - t0
        if rank == 0:
            n = max(1, int(stats[0]))
            print(
                f"epoch {epoch}: {n} samples, loss {stats[2] / n:.3f}, acc {stats[1] / n:.3f}, "
                f"{n / dt:.0f} img/s total ({loader.epoch_info})",
                flush=True,
            )
    if args.checkpoint:
        save()
    if log:
        log.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
