"""StageLayers: which of a model's layers one process holds (llama.cpp's layer split: a
pipeline stage).  The whole model is one stage, the first and the last; stage 0 of several
holds the token embedding, the last the output norm and output matrix."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StageLayers:
    il0: int  # first layer held
    il1: int  # one past the last
    first: bool = True  # holds the token embedding (inputs are tokens)
    last: bool = True  # holds output_norm and the output matrix (outputs are logits)

    @property
    def ids(self) -> list[int]:
        return list(range(self.il0, self.il1))

    @property
    def n_layer(self) -> int:
        return self.il1 - self.il0

    @classmethod
    def whole(cls, n_layer: int) -> "StageLayers":
        return cls(0, n_layer, True, True)

    def holds(self, tensor_name: str) -> bool:
        """Is this tensor among the stage's weights?  blk.N.* by layer; token_embd on the first
        stage (and on the last, where the output is tied to it); output* on the last."""
        if tensor_name.startswith("blk."):
            il = int(tensor_name.split(".", 2)[1])
            return self.il0 <= il < self.il1
        if tensor_name.startswith("token_embd."):
            return self.first or self.last
        if tensor_name.startswith("output"):
            return self.last
        return self.first
