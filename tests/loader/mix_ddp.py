"""A mixture under torchrun + gloo (run by tests/loader/test_mixtures.py): iterate one epoch with a collective
per step, log each step's keys per rank, checkpoint the loader and stop after ``--stop-after`` steps.

    python -m torch.distributed.run --nproc-per-node=3 tests/loader/mix_ddp.py --source A --source B --workers 2 ...
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist

import shardkit


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--source", action="append", required=True, help="split URL (each seen once per epoch: repeat=1)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--stop-after", type=int, default=0)
    p.add_argument("--log-ids", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = shardkit.load(
        [shardkit.Source(u, repeat=1) for u in args.source],
        batch_size=4,
        size=16,
        num_workers=args.workers,
        pin_memory=False,
        seed=3,
        with_keys=True,
        policy="pad",
    )
    if os.path.exists(args.checkpoint):
        loader.load_state_dict(torch.load(args.checkpoint, weights_only=False))
    padded = loader.epoch_info.padded
    with open(os.path.join(args.log_ids, f"rank{rank}.jsonl"), "w") as log:
        for step, (_, _, keys) in enumerate(loader):
            log.write(json.dumps({"keys": list(keys), "padded": padded}) + "\n")
            flag = torch.ones(1)
            dist.all_reduce(flag)  # a rank with fewer batches would hang here
            if args.stop_after and step + 1 >= args.stop_after:
                state = loader.state_dict()
                if rank == 0:
                    torch.save(state, args.checkpoint + ".tmp")
                    os.replace(args.checkpoint + ".tmp", args.checkpoint)
                break
    loader.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
