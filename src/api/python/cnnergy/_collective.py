"""How the ranks of a data-parallel job agree on a decision: every rank measures its own GPU, the
per-window energies are summed over the ranks, rank 0 decides and every rank applies. Through
torch.distributed when it is initialised; a plain single process otherwise."""
import sys


class Single:
    """One process: sums and broadcasts are the identity."""

    rank, world_size = 0, 1

    def sum_floats(self, values):
        return list(values)

    def broadcast(self, obj):
        return obj


class TorchDistributed:
    """torch.distributed (gloo or NCCL), already initialised by the training script."""

    def __init__(self, dist):
        import torch
        self._torch, self._dist = torch, dist
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        nccl = dist.get_backend() == "nccl"
        self._device = (torch.device("cuda", torch.cuda.current_device()) if nccl
                        else torch.device("cpu"))

    def sum_floats(self, values):
        t = self._torch.tensor(list(values), dtype=self._torch.float64, device=self._device)
        self._dist.all_reduce(t)
        return t.cpu().tolist()

    def broadcast(self, obj):
        box = [obj]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]


def default_collective():
    """torch.distributed when the script initialised it (torch is never imported here just to
    find out), else a single process."""
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return TorchDistributed(dist)
    return Single()
