"""Many processes with torch.distributed: set-up from torchrun's environment, and the collectives training uses.

Every collective goes through `Distributed._all_reduce`, on a tensor of the device the backend
accepts: the rank's GPU under nccl (which handles CUDA tensors only), the CPU under gloo.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.rendezvous import rendezvous
from torch.nn.parallel import DistributedDataParallel

from mtkit.core.errors import MtkitError


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

    def require_same(self, value: str, what: str) -> None:
        """Every rank must hold the same `value` (a digest of `what`): if one differs, all raise."""
        values = self.gather_objects(value)
        other = next((rank for rank, v in enumerate(values) if v != values[0]), None)
        if other is not None:
            raise MtkitError(
                f"{what} differs between processes: rank {other}'s (digest {values[other][:12]}) is not rank 0's "
                f"({values[0][:12]}); every node must hold the same data"
            )

    def data_parallel(self, module: nn.Module, device: torch.device) -> DistributedDataParallel:
        """`module` under DDP. Its buffers (positions, the output mask) are alike on every rank: none is
        broadcast. torch 2.13 deprecates broadcast_buffers with a warning at every launch, but its
        replacement still syncs the buffers once at start."""
        device_ids = [device.index] if device.type == "cuda" else None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)
            return DistributedDataParallel(module, device_ids=device_ids, broadcast_buffers=False)

    def gather_objects(self, obj) -> list:
        if not self.enabled:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def init_distributed(device_type: str, timeout_s: float = 600.0) -> Distributed:
    """Join the process group when started by torchrun (WORLD_SIZE > 1): gloo on CPU, nccl on GPU. A
    collective that waits more than `timeout_s` for another process (one that hangs without dying)
    fails, and the process stops with one line (lost_peer)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)  # all_gather_object and barrier use the current device under nccl
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        store, rank, world_size = next(rendezvous("env://"))  # torchrun's store, as init_process_group's default
        # After a restart (torchrun --max-restarts) the store still holds the addresses the failed attempt's
        # processes published; a process that read one would connect to the dead and hang. Each attempt
        # publishes under its own prefix.
        attempt = dist.PrefixStore(f"mtkit/attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/", store)
        timeout = timedelta(seconds=timeout_s)
        dist.init_process_group(backend=backend, store=attempt, rank=rank, world_size=world_size, timeout=timeout)
    return Distributed(dist.get_rank(), dist.get_world_size(), local_rank, device)


def shutdown_distributed() -> None:
    """Leave the process group (nccl completes its pending work here). A torchrun worker then ends
    without finalizing the interpreter, where gloo's threads could abort it
    (mtkit.cli.app.run_without_finalizing)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def lost_peer(err: BaseException) -> str | None:
    """What a failed collective says when another process of the job is gone (it died, or the network
    between them broke), as one line; None for any other error."""
    text, world_size = str(err), int(os.environ.get("WORLD_SIZE", "1"))  # the group may be torn down by now
    if world_size <= 1:
        return None
    if not isinstance(err, dist.DistError) and not any(word in text for word in ("gloo", "NCCL", "Connection")):
        return None
    detail = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
    detail = detail.split("] ", 1)[-1].split(". This is typically", 1)[0]  # gloo's source location and advice
    return (
        f"rank {os.environ.get('RANK', '?')} of {world_size} lost another process of the job ({detail}): it stopped "
        "or the network failed, and its own log says why; continue from the last checkpoint with --auto-resume"
    )
