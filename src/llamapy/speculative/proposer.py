"""The draft sources behind one small interface, and their parameters (llama.cpp's flag names
and defaults, common/common.h common_params_speculative_*).

A proposer has draft(tokens, n_max) -> up to n_max draft tokens after `tokens` (the slot's
sequence so far, its last token just sampled and not yet in the target cache), and
accepted(tokens) after verification (a draft model drops its rejected cells there).
Drafts are deterministic (an n-gram lookup, a draft model's argmax): the rejection sampler
(Sampler.verify) relies on it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

SPEC_TYPES = ("none", "draft-simple", "ngram-simple")


class Proposer(Protocol):
    def draft(self, tokens: list[int], n_max: int) -> list[int]: ...

    def accepted(self, tokens: list[int]) -> None: ...


@dataclass(frozen=True, slots=True)
class SpecParams:
    type: str = "none"  # --spec-type
    draft_model: str | None = None  # -md / --spec-draft-model (draft-simple)
    n_max: int = 3  # --spec-draft-n-max
    n_min: int = 0  # --spec-draft-n-min: a shorter draft is not verified
    p_min: float = 0.0  # --spec-draft-p-min: drafting stops below this top probability
    ngram_size_n: int = 12  # --spec-ngram-simple-size-n
    ngram_size_m: int = 48  # --spec-ngram-simple-size-m

    def __post_init__(self) -> None:
        if self.type not in SPEC_TYPES:
            raise ValueError(f"--spec-type {self.type!r}: expected one of {', '.join(SPEC_TYPES)}")
        if self.n_max < 0:
            raise ValueError(f"--spec-draft-n-max {self.n_max}: must be >= 0 (the most tokens drafted per step)")
        if self.n_min < 0 or self.n_min > max(self.n_max, 0):
            raise ValueError(f"--spec-draft-n-min {self.n_min}: must be in [0, --spec-draft-n-max = {self.n_max}]")
        if not 0.0 <= self.p_min <= 1.0:
            raise ValueError(f"--spec-draft-p-min {self.p_min}: must be in [0, 1]")
        for flag, v in (("--spec-ngram-simple-size-n", self.ngram_size_n), ("--spec-ngram-simple-size-m", self.ngram_size_m)):
            if not 1 <= v <= 1024:
                raise ValueError(f"{flag} {v}: must be between 1 and 1024")
        if self.type == "draft-simple" and not self.draft_model:
            raise ValueError("--spec-type draft-simple needs a draft model: -md / --spec-draft-model PATH|NAME")

    @property
    def draft_len(self) -> int:
        """The most tokens one step drafts: n_max for a draft model, size_m for n-grams."""
        return self.ngram_size_m if self.type == "ngram-simple" else self.n_max


@dataclass(slots=True)
class Backoff:
    """How much to draft, from how the last drafts fared.  A rejected draft costs a wider
    decode for nothing, and rows are not free at these counts (SmolLM2 Q4_1 on a 2-core Intel
    Xeon, benchmarks/decode_rows.py: 1 row 4.9 ms, 3 rows 9.0, 9 rows 19.5), so:
    - the draft length starts short, at `start` (a miss of 2 drafts costs 0.8 one-row decodes,
      one of 8 drafts 3), and doubles after a draft accepted whole (2, 4, .. 32, 48: a long
      repeat reaches n-gram drafts of 48 in five verifications); after a partial one it
      becomes twice what was accepted (at least 2);
    - after `misses` verifications in a row that accepted nothing, the next drafts are
      skipped for 1, 2, 4, .. up to `max_skip` steps; any accepted token resets that."""

    start: int = 2
    misses: int = 2
    max_skip: int = 16
    n_len: int = 0  # the current draft length (0: start)
    n_miss: int = 0
    skip: int = 0  # steps left to skip
    span: int = 0  # the last skip length

    def length(self, n_max: int) -> int:
        """The draft length to ask for now (0: skip this step)."""
        if self.skip > 0:
            self.skip -= 1
            return 0
        return min(n_max, self.n_len or self.start)

    def record(self, n_draft: int, n_accepted: int) -> None:
        if n_draft == 0:
            return
        if n_accepted == n_draft:
            self.n_len = min(1024, 2 * n_draft)
        else:
            self.n_len = max(2, 2 * n_accepted)
        if n_accepted > 0:
            self.n_miss = self.span = 0
            return
        self.n_miss += 1
        if self.n_miss >= self.misses:
            self.span = min(self.max_skip, max(1, 2 * self.span))
            self.skip, self.n_miss = self.span, 0


@dataclass(slots=True)
class Speculator:
    """A proposer with its limits, and what it has drafted and had accepted."""

    proposer: Proposer
    n_max: int
    n_min: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_verifications: int = 0
    keep: list = field(default_factory=list)  # objects the proposer needs alive (a draft model)
    backoff: Backoff | None = field(default_factory=Backoff)  # None: draft every step

    def draft(self, tokens: list[int], room: int) -> list[int]:
        """A draft of at most min(n_max, room) tokens, [] when shorter than n_min or while
        backing off."""
        n = min(self.n_max, room)
        if self.backoff is not None:
            n = self.backoff.length(n)
        if n <= 0:
            return []
        d = self.proposer.draft(tokens, n)[:n]
        return d if len(d) >= max(self.n_min, 1) else []

    def reset(self) -> None:
        """Forget every sequence and count (a benchmark's next repetition)."""
        self.n_drafted = self.n_accepted = self.n_verifications = 0
        if self.backoff is not None:
            self.backoff = Backoff(self.backoff.start, self.backoff.misses, self.backoff.max_skip)
        clear = getattr(self.proposer, "reset", None)
        if clear is not None:
            clear()

    def shift(self, n_keep: int, n_discard: int) -> None:
        """The target sequence's context shift, for a proposer with a cache of its own."""
        move = getattr(self.proposer, "shift", None)
        if move is not None:
            move(n_keep, n_discard)

    def prefill(self, tokens: list[int]) -> None:
        """The prompt, for a proposer that reads it ahead (a draft model's cache)."""
        pre = getattr(self.proposer, "prefill", None)
        if pre is not None:
            pre(tokens)

    def settle(self, tokens: list[int], n_draft: int, n_accepted: int) -> None:
        """After a verification: the next draft's length from this one's fate, and the proposer
        told the sequence kept (a draft model drops its rejected cells).  The counts are
        speculative.verify's, made as it goes: a request may end, with its timings, inside a
        verification."""
        if self.backoff is not None:
            self.backoff.record(n_draft, n_accepted)
        self.proposer.accepted(tokens)


def make_speculator(params: SpecParams, target, cparams=None) -> Speculator | None:
    """The speculator params ask for, over `target` (a Model); None for --spec-type none.
    draft-simple loads its model (a path or a registry name) with a context like the target's
    (cparams: its n_ctx, threads, ubatch) and checks the vocabularies match."""
    if params.type == "none":
        return None
    props = make_proposers(params, target, cparams, 1)
    return Speculator(props[0], params.draft_len, params.n_min, keep=props)


def make_proposers(params: SpecParams, target, cparams=None, n_seq: int = 1) -> list[Proposer]:
    """One proposer per sequence 0..n_seq-1 (the server's slots): n-gram lookups, or the
    sequences of one draft context of n_seq sequences laid out as the target's (cparams)."""
    if params.type == "ngram-simple":
        from .ngram_simple import NgramSimple

        return [NgramSimple(params.ngram_size_n, params.ngram_size_m) for _ in range(n_seq)]
    from dataclasses import replace

    from ..context import Context
    from ..model.model import Model
    from ..params import ContextParams
    from ..registry import resolve_model
    from .draft_simple import DraftSimple, check_same_vocab

    draft_model = Model.load(resolve_model(params.draft_model), device=str(getattr(target, "device", "auto")))
    check_same_vocab(target, draft_model)
    cp = cparams if cparams is not None else ContextParams()
    dctx = Context(draft_model, replace(cp, n_seq_max=n_seq, kv_unified=True if n_seq == 1 else cp.kv_unified))
    return [DraftSimple(dctx, params.p_min, seq_id=i) for i in range(n_seq)]
