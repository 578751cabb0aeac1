"""Many processes with torch.distributed: set-up from torchrun's environment, and the collectives training uses.

Every collective goes through `Distributed._all_reduce`, on a tensor of the device the backend
accepts: the rank's GPU under nccl (which handles CUDA tensors only), the CPU under gloo.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # where collectives run

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _all_reduce(self, values: list[float], op: dist.ReduceOp.RedOpType) -> list[float]:
        if not self.enabled:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op)
        return tensor.tolist()

    def any(self, flag: bool) -> bool:
        """True on every rank if `flag` is true on any rank (keeps ranks in step)."""
        return self._all_reduce([1.0 if flag else 0.0], dist.ReduceOp.MAX)[0] > 0

    def max(self, value: float) -> float:
        """The largest of the ranks' values, on every rank."""
        return self._all_reduce([value], dist.ReduceOp.MAX)[0]

    def sum(self, values: list[float]) -> list[float]:
        """The element-wise sums of the ranks' values, on every rank."""
        return self._all_reduce(values, dist.ReduceOp.SUM)

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def gather_objects(self, obj) -> list:
        if not self.enabled:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def init_distributed(device_type: str) -> Distributed:
    """Join the process group when started by torchrun (WORLD_SIZE > 1): gloo on CPU, nccl on GPU."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)  # all_gather_object and barrier use the current device under nccl
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size(), local_rank, device)


def shutdown_distributed() -> None:
    """Destroy the process group, and collect what still holds it (a DDP wrapper in a reference cycle)
    while the interpreter is fully alive. Left to interpreter exit, gloo's threads are torn down during
    finalization, where one of them can abort its process ("terminate called without an active
    exception", exit code -6) after a run that finished well."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        gc.collect()
