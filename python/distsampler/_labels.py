"""The label convention the trainers share (Hugging Face's and OLMo-core's cross-entropy, and
PyTorch's ``ignore_index``): a target of -100 is not trained on."""
from typing import Any, Dict

import torch

IGNORE_INDEX = -100


def masked_labels(batch: Dict[str, Any]) -> torch.Tensor:
    """A TokenStream batch's labels (the next tokens) with IGNORE_INDEX where its loss mask is 0."""
    labels: torch.Tensor = batch["labels"].masked_fill(batch["loss_mask"] == 0, IGNORE_INDEX)
    return labels
