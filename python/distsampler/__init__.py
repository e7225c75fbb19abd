"""distsampler: deterministic distributed sampling for data-parallel training.

The C++ core (``distsampler._core``) computes the dataset indices a rank reads in an epoch as a
pure function of (configuration, epoch, rank, position). ``distsampler.torch.DistributedSampler``
is the PyTorch drop-in; importing ``distsampler`` alone does not import torch.
"""
from ._core import __version__

__all__ = ["__version__"]
