"""What the DataLoader tests share: a dataset whose item i is i, and batches flattened back."""
import torch
import torch.utils.data as tud


class Indices(tud.Dataset):
    """Item i is i: a batch shows which indices the loader read. ``size`` may be changed."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        return index


def flat(batches):
    """The indices of a sequence of batches (tensors, lists) or of single indices, in order."""
    out = []
    for batch in batches:
        if isinstance(batch, torch.Tensor):
            out.extend(batch.reshape(-1).tolist())
        elif isinstance(batch, (list, tuple)):
            out.extend(int(x) for x in batch)
        else:
            out.append(int(batch))
    return out
