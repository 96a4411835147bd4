"""llama-perplexity's KL-divergence mode (tools/perplexity/perplexity.cpp).

--kl-divergence-base FILE alone: while computing perplexity, save the log-probabilities of every
scored token to FILE.  --kl-divergence-base FILE --kl-divergence: take the tokens from FILE,
score them with the current model and compare against the saved distribution (KL divergence,
same top token, Δp, ln(PPL(Q)/PPL(base))).

The file is llama.cpp's, byte for byte, so either program reads what the other wrote:

    "_logits_"  int32 n_ctx  int32 n_vocab  int32 n_chunk  int32 tokens[n_chunk*n_ctx]
    then for each chunk, for each of its n_ctx-1-n_ctx/2 scored tokens, nv = 2*((n_vocab+1)/2)+4
    uint16: two float32 (scale, min_log_prob), then n_vocab quantized log-probs (+1 pad if odd)

with log p[i] = scale*q[i] + min_log_prob.  Everything is little-endian (llama.cpp writes its
native order).  The arithmetic below follows llama.cpp's two log_softmax overloads op for op:
float32 where it uses float, float64 where it uses double (exp sums, KLD sums), vectorized over
rows instead of one thread per row."""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

MAGIC = b"_logits_"
HEADER = struct.Struct("<8siii")  # magic, n_ctx, n_vocab, n_chunk
ROW_BLOCK = 64  # rows per vectorized step: bounds the [rows, n_vocab] temporaries

CHUNK_HEADER = ("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence"
                "              Δp RMS            Same top p")


def row_width(n_vocab: int) -> int:
    """uint16 per scored token: nv = 2*((n_vocab + 1)/2) + 4."""
    return 2 * ((n_vocab + 1) // 2) + 4


def n_scored(n_ctx: int) -> int:
    """Scored tokens per chunk: the second half, less the last position (no next token)."""
    return n_ctx - 1 - n_ctx // 2


def quantize_log_probs(logits: torch.Tensor) -> np.ndarray:
    """llama.cpp's log_softmax(n_vocab, logits, uint16_t * log_prob, tok) over rows:
    logits [n, n_vocab] -> uint16 [n, nv].  Log-probs below max - 16 are stored as 0 (the
    floor min_log_prob); the rest as round((logit - min_logit) / scale), scale = range/65535
    (nearest_int rounds half to even, as torch.round does)."""
    lg = logits.detach().to("cpu", torch.float32)
    n, n_vocab = lg.shape
    max_logit = lg.max(dim=1).values
    min_logit = torch.maximum(lg.min(dim=1).values, max_logit - 16)
    sum_exp = torch.exp(lg - max_logit[:, None]).to(torch.float64).sum(dim=1)
    log_sum_exp = torch.log(sum_exp).to(torch.float32)
    min_log_prob = (min_logit - max_logit) - log_sum_exp
    scale = (max_logit - min_logit) / 65535.0
    inv_scale = 1 / scale  # inf where scale == 0: those rows are all zeros below
    q = torch.round(inv_scale[:, None] * (lg - min_logit[:, None]))
    keep = (lg > min_logit[:, None]) & (scale[:, None] != 0)
    q = torch.where(keep, q, torch.zeros((), dtype=torch.float32))
    out = np.zeros((n, row_width(n_vocab)), dtype="<u2")
    head = torch.stack([scale, min_log_prob], dim=1).numpy().astype("<f4")  # [n, 2]
    out[:, :4] = head.view("<u2")
    out[:, 4:4 + n_vocab] = q.to(torch.int32).numpy().astype("<u2")
    return out


def dequantize_log_probs(rows: np.ndarray, n_vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """uint16 [n, nv] -> (log p [n, n_vocab] float32 = scale*q + min_log_prob, scale [n])."""
    head = torch.from_numpy(np.ascontiguousarray(rows[:, :4]).view("<f4").astype(np.float32))  # [n, 2]
    q = torch.from_numpy(rows[:, 4:4 + n_vocab].astype(np.float32))
    return head[:, :1] * q + head[:, 1:2], head[:, 0]


# --- the base file ------------------------------------------------------------------------------
@dataclass(slots=True)
class BaseWriter:
    """Writes the base file as perplexity() runs: the header at create(), then add() per chunk
    with that chunk's scored logits (the on_logits hook of bench.perplexity.perplexity)."""

    path: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    f: BinaryIO
    chunks_written: int = 0

    @classmethod
    def create(cls, path: str | Path, n_ctx: int, n_vocab: int, tokens: list[int], n_chunk: int) -> "BaseWriter":
        """tokens: the whole tokenized text; its first n_chunk*n_ctx go into the header."""
        if len(tokens) < n_chunk * n_ctx:
            raise ValueError(f"{n_chunk} chunks of {n_ctx} need {n_chunk * n_ctx} tokens, got {len(tokens)}")
        path = Path(path)
        f = open(path, "wb")
        f.write(HEADER.pack(MAGIC, n_ctx, n_vocab, n_chunk))
        f.write(np.asarray(tokens[:n_chunk * n_ctx], dtype="<i4").tobytes())
        return cls(path, n_ctx, n_vocab, n_chunk, f)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        if logits.shape != (n_scored(self.n_ctx), self.n_vocab):
            raise ValueError(f"expected scored logits [{n_scored(self.n_ctx)}, {self.n_vocab}], got {list(logits.shape)}")
        self.f.write(quantize_log_probs(logits).tobytes())
        self.chunks_written += 1

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> "BaseWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(slots=True)
class BaseFile:
    """An open base file: header read and checked at open(), log-prob rows read chunk by chunk
    (the file holds ~2*n_vocab bytes per scored token, too many to load whole)."""

    path: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: list[int]
    f: BinaryIO
    chunks_read: int = 0

    @classmethod
    def open(cls, path: str | Path, n_vocab: int | None = None) -> "BaseFile":
        """Raises ValueError (naming the numbers) on a bad magic, a short file, or an n_vocab
        other than the model's; FileNotFoundError when the file is missing."""
        path = Path(path)
        size = path.stat().st_size
        f = open(path, "rb")
        try:
            raw = f.read(HEADER.size)
            if len(raw) < 8 or raw[:8] != MAGIC:
                raise ValueError(f"{path} does not look like a file containing log-probabilities "
                                 f"(starts with {raw[:8]!r}, expected {MAGIC!r})")
            if len(raw) < HEADER.size:
                raise ValueError(f"{path}: failed reading n_ctx, n_vocab, n_chunk (file is {size} bytes)")
            _, n_ctx, nv_file, n_chunk = HEADER.unpack(raw)
            if n_ctx < 2 or nv_file < 1 or n_chunk < 0:
                raise ValueError(f"{path}: bad header n_ctx={n_ctx} n_vocab={nv_file} n_chunk={n_chunk}")
            if n_vocab is not None and nv_file != n_vocab:
                raise ValueError(f"{path}: inconsistent vocabulary: the base file has n_vocab {nv_file}, "
                                 f"the model has {n_vocab}")
            expect = HEADER.size + 4 * n_ctx * n_chunk + 2 * n_chunk * n_scored(n_ctx) * row_width(nv_file)
            if size < expect:
                raise ValueError(f"{path} is truncated: n_ctx {n_ctx}, n_vocab {nv_file}, n_chunk {n_chunk} "
                                 f"need {expect} bytes, the file has {size}")
            tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype="<i4").tolist()
        except BaseException:
            f.close()
            raise
        return cls(path, n_ctx, nv_file, n_chunk, tokens, f)

    def check_tokens(self, tokens: list[int]) -> None:
        """The text given with --kl-divergence must tokenize to the base file's tokens: raises
        ValueError at the first difference."""
        want = self.tokens
        if len(tokens) < len(want):
            raise ValueError(f"token mismatch: {self.path} holds {len(want)} tokens "
                             f"({self.n_chunk} chunks of {self.n_ctx}), the text has {len(tokens)}")
        for i, (a, b) in enumerate(zip(want, tokens)):
            if a != b:
                raise ValueError(f"token mismatch at position {i}: {self.path} has token {a}, the text has {b}")

    def next_chunk(self) -> np.ndarray:
        """The next chunk's rows: uint16 [n_ctx-1-n_ctx/2, nv]."""
        n, nv = n_scored(self.n_ctx), row_width(self.n_vocab)
        raw = self.f.read(2 * n * nv)
        if len(raw) < 2 * n * nv:
            raise ValueError(f"{self.path}: failed reading log-probs for chunk {self.chunks_read}")
        self.chunks_read += 1
        return np.frombuffer(raw, dtype="<u2").reshape(n, nv)

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> "BaseFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- the statistics -----------------------------------------------------------------------------
def _mean_and_uncertainty(s: float, s2: float, count: int) -> tuple[float, float]:
    if count < 1:
        return 0.0, 0.0
    f = s / count
    df = s2 / count - f * f
    return f, (math.sqrt(df / (count - 1)) if df > 0 and count > 10 else 0.0)


def _covariance(sa: float, sb: float, sab: float, count: int) -> float:
    if count < 10:
        return 0.0
    return (sab / count - (sa / count) * (sb / count)) / (count - 1)


def _cdiv(a: float, b: float) -> float:
    """C's a/b on doubles: inf or nan instead of ZeroDivisionError."""
    if b != 0:
        return a / b
    return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)


def _csqrt(x: float) -> float:
    """C's sqrt: nan for a negative argument instead of ValueError."""
    return math.sqrt(x) if x >= 0 else math.nan


def _percentile(values: np.ndarray, fraction: float) -> np.float32:
    """llama.cpp's percentile lambda, in float32 like it: values sorted ascending."""
    if fraction <= 0:
        return values[0]
    if fraction >= 1:
        return values[-1]
    p = np.float32(fraction) * np.float32(len(values) - 1)
    ip = int(p)
    p = p - np.float32(ip)
    return (np.float32(1) - p) * values[ip] + p * values[min(ip + 1, len(values) - 1)]


def _median(values: np.ndarray) -> np.float32:
    n = len(values)
    return np.float32(0.5) * (values[n // 2] + values[n // 2 - 1]) if n % 2 == 0 else values[n // 2]


@dataclass(slots=True)
class KldStats:
    """kl_divergence_result plus the per-token KLD and Δp values, accumulated over chunks."""

    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0
    kld_values: list[torch.Tensor] = field(default_factory=list)  # float32 per token, chunk by chunk
    p_diff_values: list[torch.Tensor] = field(default_factory=list)

    def add(self, logits: torch.Tensor, base_rows: np.ndarray, targets: torch.Tensor) -> None:
        """llama.cpp's log_softmax(n_vocab, logits, base_log_prob, tok, kld) over rows:
        logits [n, n_vocab] of the model under test (Q), base_rows uint16 [n, nv], targets [n]."""
        lg_all = logits.detach().to("cpu", torch.float32)
        tg_all = targets.to("cpu", torch.long).view(-1)
        n_vocab = lg_all.shape[1]
        for r0 in range(0, lg_all.shape[0], ROW_BLOCK):
            lg, tg = lg_all[r0:r0 + ROW_BLOCK], tg_all[r0:r0 + ROW_BLOCK, None]
            p_log_base, _ = dequantize_log_probs(base_rows[r0:r0 + ROW_BLOCK], n_vocab)
            imax = lg.argmax(dim=1)  # first maximum, as the strict > loop
            max_logit = lg.gather(1, imax[:, None])[:, 0]
            sum_exp = torch.exp(lg - max_logit[:, None]).to(torch.float64).sum(dim=1)
            log_sum_exp = torch.log(sum_exp).to(torch.float32)
            nll = (max_logit + log_sum_exp) - lg.gather(1, tg)[:, 0]  # float32
            nll_base = -p_log_base.gather(1, tg)[:, 0]
            self.sum_nll += float(nll.double().sum())
            self.sum_nll2 += float((nll * nll).double().sum())
            self.sum_nll_base += float(nll_base.double().sum())
            self.sum_nll_base2 += float((nll_base * nll_base).double().sum())
            self.sum_nll_nll_base += float((nll * nll_base).double().sum())

            log_norm = max_logit + log_sum_exp  # max_logit += log_sum_exp
            terms = torch.exp(p_log_base) * ((p_log_base - lg) + log_norm[:, None])
            terms = torch.where(p_log_base > -16.0, terms, torch.zeros((), dtype=torch.float32))
            kld = terms.double().sum(dim=1)  # float64 per token
            self.sum_kld += float(kld.sum())
            self.sum_kld2 += float((kld * kld).sum())
            self.count += lg.shape[0]
            self.n_same_top += int((imax == p_log_base.argmax(dim=1)).sum())

            p_diff = torch.exp(-nll) - torch.exp(-nll_base)  # float32
            p_diff2 = (p_diff * p_diff).double()
            self.sum_p_diff += float(p_diff.double().sum())
            self.sum_p_diff2 += float(p_diff2.sum())
            self.sum_p_diff4 += float((p_diff2 * p_diff2).sum())
            self.max_p_diff = max(self.max_p_diff, float(p_diff.abs().max()))
            self.kld_values.append(kld.float())
            self.p_diff_values.append(p_diff)

    # the figures llama.cpp prints ---------------------------------------------------------------
    @property
    def mean_kld(self) -> float:
        return _mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count)[0]

    @property
    def same_top(self) -> float:
        """Fraction of tokens whose top-1 token is the base's."""
        return self.n_same_top / self.count if self.count else 0.0

    def _ppl_terms(self) -> tuple[tuple[float, float], tuple[float, float], float]:
        log_ppl = _mean_and_uncertainty(self.sum_nll, self.sum_nll2, self.count)
        log_ppl_base = _mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, self.count)
        cov = _covariance(self.sum_nll, self.sum_nll_base, self.sum_nll_nll_base, self.count)
        return log_ppl, log_ppl_base, cov

    def chunk_line(self, chunk: int) -> str:
        """The running row printed after each chunk (chunk counts from 1)."""
        (lp, lpu), (lb, lbu), cov = self._ppl_terms()
        ppl_val = math.exp(lp)
        s = "%4d" % chunk
        s += "    %9.4lf ± %9.4lf" % (ppl_val, ppl_val * lpu)
        s += "    %10.5lf ± %10.5lf" % (lp - lb, _csqrt(lpu * lpu + lbu * lbu - 2.0 * cov))
        s += "    %10.5lf ± %10.5lf" % _mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count)
        mse, mse_unc = _mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, self.count)
        rms = math.sqrt(mse)
        s += "    %6.3lf ± %6.3lf %%" % (100.0 * rms, 100.0 * _cdiv(0.5, rms) * mse_unc)
        top = self.same_top
        s += "    %6.3lf ± %6.3lf %%" % (100.0 * top, 100.0 * _csqrt(_cdiv(top * (1 - top), self.count - 1)))
        return s

    def summary_lines(self) -> list[str]:
        """The final statistics; none under 100 tokens ("we do not wish to do statistics on so
        few values")."""
        if self.count < 100:
            return []
        kv = np.sort(torch.cat(self.kld_values).numpy().astype(np.float32))
        pv = np.sort(torch.cat(self.p_diff_values).numpy().astype(np.float32))
        (lp, lpu), (lb, lbu), cov = self._ppl_terms()
        out = ["====== Perplexity statistics ======"]
        ppl_val, ppl_base_val = math.exp(lp), math.exp(lb)
        ppl_unc, ppl_base_unc = ppl_val * lpu, ppl_base_val * lbu
        out.append("Mean PPL(Q)                   : %10.6lf ± %10.6lf" % (ppl_val, ppl_unc))
        out.append("Mean PPL(base)                : %10.6lf ± %10.6lf" % (ppl_base_val, ppl_base_unc))
        out.append("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%" % (100.0 * _cdiv(cov, lpu * lbu)))
        ratio_val = lp - lb
        ratio_unc = _csqrt(lpu * lpu + lbu * lbu - 2.0 * cov)
        out.append("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf" % (ratio_val, ratio_unc))
        out.append("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf" % (math.exp(ratio_val), math.exp(ratio_val) * ratio_unc))
        ppl_cov = ppl_val * ppl_base_val * cov
        diff_unc = _csqrt(ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov)
        out.append("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf" % (ppl_val - ppl_base_val, diff_unc))
        out.append("")
        out.append("====== KL divergence statistics ======")
        out.append("Mean    KLD: %10.6lf ± %10.6lf" % _mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count))
        out.append("Maximum KLD: %10.6f" % kv[-1])
        for label, fr in (("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900)):
            out.append("%s   KLD: %10.6f" % (label, _percentile(kv, fr)))
        out.append("Median  KLD: %10.6f" % _median(kv))
        for label, fr in (("10.0%", 0.100), (" 5.0%", 0.050), (" 1.0%", 0.010), (" 0.1%", 0.001)):
            out.append("%s   KLD: %10.6f" % (label, _percentile(kv, fr)))
        out.append("Minimum KLD: %10.6f" % kv[0])
        out.append("")
        out.append("====== Token probability statistics ======")
        pd, pdu = _mean_and_uncertainty(self.sum_p_diff, self.sum_p_diff2, self.count)
        out.append("Mean    Δp: %6.3lf ± %5.3lf %%" % (100.0 * pd, 100.0 * pdu))
        out.append("Maximum Δp: %6.3lf%%" % (100.0 * pv[-1]))
        for label, fr in (("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900), ("75.0%", 0.750)):
            out.append("%s   Δp: %6.3lf%%" % (label, 100.0 * _percentile(pv, fr)))
        out.append("Median  Δp: %6.3lf%%" % (100.0 * _median(pv)))
        for label, fr in (("25.0%", 0.250), ("10.0%", 0.100), (" 5.0%", 0.050), (" 1.0%", 0.010), (" 0.1%", 0.001)):
            out.append("%s   Δp: %6.3lf%%" % (label, 100.0 * _percentile(pv, fr)))
        out.append("Minimum Δp: %6.3lf%%" % (100.0 * pv[0]))
        mse, mse_unc = _mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, self.count)
        rms = math.sqrt(mse)
        out.append("RMS Δp    : %6.3lf ± %5.3lf %%" % (100.0 * rms, 100.0 * _cdiv(0.5, rms) * mse_unc))
        top = self.same_top
        out.append("Same top p: %6.3lf ± %5.3lf %%" % (100.0 * top, 100.0 * _csqrt(_cdiv(top * (1.0 - top), self.count - 1))))
        return out


@dataclass(slots=True)
class KldRun:
    """The on_logits hook of --kl-divergence: each chunk's scored logits against the base
    file's next rows.  Checks the targets are the base file's tokens (a chunking or tokenizer
    mismatch raises ValueError naming the chunk, position and both ids)."""

    base: BaseFile
    stats: KldStats = field(default_factory=KldStats)

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        c = self.base.chunks_read
        n_ctx, first = self.base.n_ctx, self.base.n_ctx // 2
        if c >= self.base.n_chunk:
            raise ValueError(f"{self.base.path} holds {self.base.n_chunk} chunks, a chunk {c + 1} was scored")
        s0 = c * n_ctx + first + 1
        want = self.base.tokens[s0:s0 + n_scored(n_ctx)]
        got = targets.view(-1).tolist()
        if got != want:
            k = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            raise ValueError(f"token mismatch in chunk {c + 1} at position {s0 + k}: {self.base.path} has "
                             f"{want[k] if k < len(want) else None}, the scored text has {got[k] if k < len(got) else None}")
        self.stats.add(logits, self.base.next_chunk(), targets)
