"""DistributedDataParallel around ORTModule, 2 processes on gloo: the gradients after one
step equal those of one process on the concatenated batch. Run by test_ortmodule.py."""

import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

warnings.filterwarnings("ignore", category=DeprecationWarning)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batch():
    generator = torch.Generator().manual_seed(3)
    return torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)


def worker(rank: int, world: int, folder: str) -> None:
    from onnxtrain.training.ortmodule import ORTModule

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("DDP_TEST_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    ddp = torch.nn.parallel.DistributedDataParallel(ORTModule(model()))
    x, y = batch()
    part = slice(rank * 4, rank * 4 + 4)
    torch.nn.functional.cross_entropy(ddp(x[part]), y[part]).backward()
    assert ddp.module.runs_in_onnxtrain
    torch.save([p.grad for p in ddp.module.parameters()], os.path.join(folder, f"rank{rank}.pt"))
    dist.destroy_process_group()


def main() -> None:
    folder = sys.argv[1]
    os.environ["DDP_TEST_PORT"] = str(29500 + os.getpid() % 400)
    mp.spawn(worker, args=(2, folder), nprocs=2, join=True)
    single = model()
    x, y = batch()
    torch.nn.functional.cross_entropy(single(x), y).backward()
    for rank in range(2):
        grads = torch.load(os.path.join(folder, f"rank{rank}.pt"))
        for g, p in zip(grads, single.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)
    print("gradients equal")


if __name__ == "__main__":
    main()
