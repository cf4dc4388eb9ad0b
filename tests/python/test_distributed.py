"""Data parallelism through PyTorch's own engines with Kiln-compiled graphs: two processes on the
CPU (gloo) each train their share of the global batch under backend="kiln", wrapped in
DistributedDataParallel or sharded by FSDP2's fully_shard, and must match one process
training eagerly on the whole batch: the mean loss of every step and the parameters after the
last, with nothing left to PyTorch. On a GPU (only one is lent to a test machine), one rank
over NCCL on cuda:0 does the same."""

import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

import kiln

WORLD = 2
STEPS = 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(16, 32)
        self.out = nn.Linear(32, 5)

    def forward(self, x):
        return self.out(F.gelu(self.hidden(x)))


def global_batches():
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 5, (8,), generator=g))
            for _ in range(STEPS)]


def wrap(model: nn.Module, engine: str) -> nn.Module:
    if engine == "ddp":
        return nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard
    fully_shard(model.hidden)
    fully_shard(model)
    return model


def train_rank(rank: int, world: int, engine: str, device: str, folder: str):
    """One process of `world`: its share of each global batch on `device` ("cpu" over gloo,
    "cuda" over NCCL, a GPU a rank), Kiln compiling the wrapped model's graphs; rank 0 saves the
    mean losses, the full parameters and what Kiln made of the graphs."""
    on_gpu = device == "cuda"
    if on_gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if on_gpu else "gloo",
                            init_method=f"file://{folder}/rendezvous", rank=rank,
                            world_size=world)
    place = torch.device("cuda", rank) if on_gpu else torch.device("cpu")
    try:
        torch.manual_seed(0)
        model = wrap(Net().to(place), engine)
        report = kiln.Report()
        compiled = torch.compile(model, backend=kiln.make_backend(report))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for x, labels in global_batches():
            part = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
            loss = F.cross_entropy(compiled(x[part].to(place)), labels[part].to(place))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / world)
        # FSDP2's parameters are shards (DTensors): gathered whole on every rank.
        params = [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
                  for p in model.parameters()]
        if rank == 0:
            torch.save({"losses": losses, "params": params, "fallbacks": report.fallbacks,
                        "graphs": len(report.graphs)}, f"{folder}/rank0.pt")
    finally:
        dist.destroy_process_group()


def train_and_compare(world: int, engine: str, device: str, tolerance: float):
    """`world` processes on `device` under `engine` against one eager process on the CPU on the
    whole batch: each step's loss within `tolerance` relative, the parameters within ten
    times that."""
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(train_rank, args=(world, engine, device, folder), nprocs=world)
        result = torch.load(f"{folder}/rank0.pt")
    assert result["graphs"] > 0, "no graph was compiled by Kiln"
    assert not result["fallbacks"], result["fallbacks"]

    torch.manual_seed(0)
    reference = Net()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step, (x, labels) in enumerate(global_batches()):
        loss = F.cross_entropy(reference(x), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert abs(result["losses"][step] - loss.item()) <= tolerance * (1 + abs(loss.item())), \
            step
    for (name, expected), actual in zip(reference.named_parameters(), result["params"]):
        torch.testing.assert_close(actual, expected.detach(), rtol=10 * tolerance,
                                   atol=tolerance / 10, msg=name)


@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_two_processes_match_one_on_the_global_batch(engine):
    train_and_compare(WORLD, engine, "cpu", 1e-6)


@pytest.mark.skipif(not torch.cuda.is_available() or not dist.is_nccl_available(),
                    reason="no GPU with NCCL")
@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_one_rank_on_cuda_over_nccl_matches_eager(engine):
    # The GPU's kernels sum in other orders than the CPU's eager reference.
    train_and_compare(1, engine, "cuda", 1e-5)
