"""Stand-in for PyTorch on simulated nodes: version facts and a torch.cuda that reads the simulated GPU profile.

No tensor math. Generated into wheels by sim/mirrors/build.py; torch/version.py carries the variant.
"""

from . import cuda, version
from .version import __version__

__all__ = ["Tensor", "__version__", "cuda", "device", "empty", "ones", "version", "zeros"]


class device:
    def __init__(self, spec="cpu"):
        spec = str(spec)
        self.type, _, index = spec.partition(":")
        self.index = int(index) if index else None

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")


class Tensor:
    """Just enough of a tensor to place it on a device: moving it to CUDA runs the simulated kernel-image check."""

    def __init__(self, shape, dev="cpu"):
        self.shape = tuple(shape)
        self.device = device(dev)
        if self.device.type == "cuda":
            cuda._launch_check(self.device.index or 0)

    def to(self, dev):
        return Tensor(self.shape, dev)

    def cuda(self, index=None):
        return Tensor(self.shape, "cuda" if index is None else f"cuda:{index}")

    def cpu(self):
        return Tensor(self.shape, "cpu")


def zeros(*shape, device="cpu", **_kwargs):
    return Tensor(shape, device)


ones = empty = zeros
