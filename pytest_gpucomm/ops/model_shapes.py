"""The model shapes whose training traffic the patterns of :mod:`.patterns` put on the network: the numbers of
a model that set it (parameters of the data-parallel gradient, hidden size, layers, sequence, micro-batches,
experts), from the models' public configs (``suites/test_training_traffic.py`` names the sources).  A new
shape is an entry of :data:`MODELS`; a test file may add its own (``MODELS.setdefault("tiny", ModelShape(...))``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelShape", "MODELS"]


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a model that set its training traffic (see the suite for the sources)."""

    name: str
    params: float  # parameters in the data-parallel gradient of one rank (see ``dp_note``)
    hidden: int
    layers: int
    seq: int = 8192  # tokens per sequence
    micro_batch: int = 1  # sequences per micro-batch
    micro_batches: int = 8  # micro-batches per step (pipeline parallel)
    experts: int = 0  # routed experts (0: dense)
    top_k: int = 0  # experts per token
    moe_layers: int = 0
    zipf: float = 0.6  # skew of the expert load (weights 1 / k**zipf)
    seed: int = 0
    dp_note: str = ""

    @property
    def moe(self) -> bool:
        return self.experts > 0


#: The model shapes of the suite, by name (sources in ``suites/test_training_traffic.py``).
MODELS: dict[str, ModelShape] = {m.name: m for m in (
    ModelShape("llama3-8b", params=8.03e9, hidden=4096, layers=32),
    # 70.6e9 parameters: a 141 GB bf16 gradient, more than one GPU holds; 70B trains with tensor parallelism of 8
    # inside a node, and data parallelism all-reduces the gradient of one tensor-parallel rank, 1/8 of the model
    ModelShape("llama3-70b", params=70.6e9 / 8, hidden=8192, layers=80,
               dp_note="the gradient of one tensor-parallel rank of 8 (70.6e9 / 8 parameters)"),
    ModelShape("deepseek-v2-moe", params=0.0, hidden=5120, layers=60, seq=4096, experts=160, top_k=6,
               moe_layers=59),
)}

