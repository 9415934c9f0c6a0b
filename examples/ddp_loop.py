"""A plain torch.distributed training loop, written for torchrun, that hpcqa runs unchanged on every rank:

    torchrun --nproc-per-node 2 examples/ddp_loop.py --steps 50            # works on its own
    hpcqa submit configs/quickstart.toml -- python examples/ddp_loop.py --steps 50 --lr '{train.learning_rate}'

It reads only what torchrun would give it (RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT through init_process_group's
env://), and, when they are there, hpcqa's job variables: HPCQA_CHECKPOINT_DIR (the same folder for every attempt of
the job: it saves there and resumes from it), HPCQA_RESULTS (rank 0 writes its metrics there). On SIGTERM -- a
preemption notice, which hpcqa forwards -- every rank finishes its step, they agree, rank 0 saves, and all exit 0;
the requeued job starts again from that step.
"""

import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

stop = False


def on_notice(signum, frame):
    global stop
    stop = True


def batch(step: int, rank: int, size: int = 64):
    g = torch.Generator().manual_seed(
        1000 * step + rank
    )  # each rank its own data, the same on every run
    x = torch.randn(size, 32, generator=g)
    return x, x[:, :4].sum(dim=1, keepdim=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument(
        "--step-time", type=float, default=0.0, help="seconds to sleep per step (a slower job)"
    )
    args = p.parse_args()
    signal.signal(signal.SIGTERM, on_notice)
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        f"rank {rank}/{world} on CPUs {sorted(os.sched_getaffinity(0))}, "
        f"{torch.get_num_threads()} threads, attempt {os.environ.get('HPCQA_ATTEMPT', '-')}",
        flush=True,
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    folder = os.environ.get("HPCQA_CHECKPOINT_DIR", "checkpoints")
    path = os.path.join(folder, "ddp_loop.pt")
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"rank {rank}: resumed from step {start}", flush=True)

    def save(step: int) -> None:
        if rank == 0:
            os.makedirs(folder, exist_ok=True)
            torch.save(
                {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp"
            )
            os.replace(path + ".tmp", path)
        dist.barrier()

    loss = torch.tensor(0.0)
    for step in range(start, args.steps):
        x, y = batch(step, rank)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_time)
        flag = torch.tensor([int(stop)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops after the same step
        if flag.item():
            save(step + 1)
            print(f"rank {rank}: notice received; saved step {step + 1}, exiting", flush=True)
            return 0
        if (step + 1) % args.save_every == 0:
            save(step + 1)
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    final = torch.tensor([loss.item()])
    dist.all_reduce(final)
    if rank == 0 and os.environ.get("HPCQA_RESULTS"):
        with open(os.environ["HPCQA_RESULTS"], "w") as f:
            json.dump(
                {
                    "loss": final.item() / world,
                    "steps": args.steps,
                    "resumed_from": start,
                    "lr": args.lr,
                },
                f,
            )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Done and saved: leave without the interpreter's teardown. gloo's worker threads can still hold tensors then,
    # and destroying them aborts the process ("terminate called without an active exception", SIGABRT) -- seen on
    # the test cluster after the last step was written, which turned a finished run into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
