"""Which layers each pipeline stage holds (llama.cpp's --split-mode layer with --tensor-split):
checked before any weight is read, each bad configuration a one-line error."""
from __future__ import annotations

from ..model.stage import StageLayers


class PipelineConfigError(ValueError):
    """--pp / --tensor-split that cannot make a pipeline of this model."""


def parse_tensor_split(text: str | None) -> list[float] | None:
    """"3,1" -> [3.0, 1.0] (llama.cpp's spelling: proportions, any scale); None / "" -> None."""
    if not text:
        return None
    try:
        parts = [float(x) for x in text.replace("/", ",").split(",")]
    except ValueError:
        raise PipelineConfigError(f"--tensor-split {text!r}: expected proportions separated by commas, e.g. 3,1") from None
    if any(p < 0 for p in parts) or sum(parts) <= 0:
        raise PipelineConfigError(f"--tensor-split {text!r}: proportions must be >= 0 and not all 0")
    return parts


def split_layers(n_layer: int, pp: int, tensor_split: list[float] | None = None) -> list[StageLayers]:
    """The layers of each of pp stages, in order: equal shares by default, else in proportion
    to tensor_split, as llama.cpp assigns them (layer il goes to the first stage whose
    cumulative share exceeds il / n_layer).  Raises PipelineConfigError for pp < 1, pp >
    n_layer, a tensor_split whose parts do not match pp, or a stage left without layers."""
    if pp < 1:
        raise PipelineConfigError(f"--pp {pp}: must be at least 1")
    if pp > n_layer:
        raise PipelineConfigError(f"--pp {pp} is larger than the model's {n_layer} layers: each stage needs at least one")
    shares = [1.0] * pp if tensor_split is None else list(tensor_split)
    if len(shares) != pp:
        raise PipelineConfigError(f"--tensor-split has {len(shares)} parts but --pp is {pp}: give one proportion per stage")
    total = sum(shares)
    cum, acc = [], 0.0
    for s in shares:
        acc += s / total
        cum.append(acc)
    counts = [0] * pp
    for il in range(n_layer):
        stage = next((i for i, c in enumerate(cum) if c > il / n_layer + 1e-9), pp - 1)
        counts[stage] += 1
    if 0 in counts:
        i = counts.index(0)
        raise PipelineConfigError(f"--tensor-split {','.join(f'{s:g}' for s in shares)} leaves stage {i} without layers "
                                  f"(layers per stage: {counts} of {n_layer}); raise its proportion or lower --pp")
    out, il = [], 0
    for i, n in enumerate(counts):
        out.append(StageLayers(il, il + n, first=i == 0, last=i == pp - 1))
        il += n
    return out
