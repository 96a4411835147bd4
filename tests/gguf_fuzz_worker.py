"""One batch of hypothesis-generated GGUF mutations, run in this process under a memory cap,
reported as JSON (tests/test_gguf_fuzz.py starts it as a subprocess; `make fuzz` too).

    python tests/gguf_fuzz_worker.py BASE.gguf OUT.json --examples N [--prefix BYTES] [--load]
    python tests/gguf_fuzz_worker.py BASE.gguf OUT.json --sweep [--load]

The base file's bytes (its first --prefix bytes, for the real SmolLM2) are mutated: cut at
any offset, bits flipped, bytes overwritten, and huge or boundary integers spliced into the
count and length fields (n_tensors, n_kv, key and string lengths, value types, array types
and counts, n_dims, ne, ggml types, data offsets: their offsets come from parsing the base).
--sweep instead runs every cut of the file up to its tensor data and every header byte
inverted, in order.
The property: GGUFFile + hparams_from_gguf (and, with --load, Model.load of a file that got
through them) either succeed or raise GGUFError whose message names the file and a byte
offset / a missing key; nothing else, within 20 s a case.

Memory: after the imports (and one load of the intact base) RLIMIT_AS is set to this
process's VmPeak + --headroom-mib, so an allocation sized by a hostile count fails the case
with a MemoryError instead of taking the machine.  The JSON: cases run, outcomes counted, the
limit, the seed, and the first failure (exception, traceback, the mutation) or null."""
from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from llamapy.gguf.header import VT, ArrayRef, GGUFError, GGUFHeader
from llamapy.gguf.reader import GGUFFile
from llamapy.model.hparams import hparams_from_gguf

BIG = (0, 1, 2, 3, 255, 256, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 1 << 32, (1 << 32) + 1, 1 << 40,
       (1 << 62), (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 64) - 8)
# ValueErrors Model.load may raise from code outside the GGUF parser's files (the tokenizer
# builder, the architecture registry), for files the parser accepts: (file, message).  They are
# counted apart in the report; anything else that is not a GGUFError fails the run.
OUTSIDE: tuple[tuple[str, str], ...] = ()  # none left: the tokenizer builder and the architecture registry raise GGUFError
MESSAGE = re.compile(r"\bbyte \d|\boffset [\d,]+|\bis missing\b")


class Hang(Exception):
    pass


def vm_peak() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmPeak in /proc/self/status")


def cap_memory(headroom: int) -> int:
    """RLIMIT_AS (soft) = VmPeak + headroom; returns the limit."""
    limit = vm_peak() + headroom
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def field_offsets(path: Path, prefix: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(offset, width) of every count, length and type field of the base file's header that
    lies within its first `prefix` bytes (all of them when None), and of the counts alone
    (n_tensors, n_kv, array lengths: few, so the mutations pick them more often)."""
    h = GGUFHeader(path)
    counts = [(8, 8), (16, 8)]  # n_tensors, n_kv
    out = []
    for fld in h.fields.values():
        at = fld.offset
        vat = at + 8 + len(fld.name.encode()) + 4
        out += [(at, 8), (vat - 4, 4)]  # key length, value type
        if fld.type == VT.STRING:
            out.append((vat, 8))
        elif fld.type == VT.ARRAY:
            out.append((vat, 4))  # element type
            counts.append((vat + 4, 8))
            v = fld.value
            if isinstance(v, ArrayRef) and v.item_offsets is not None:  # some string lengths
                step = max(1, v.count // 64)
                out += [(int(o), 8) for o in v.item_offsets[::step]]
    for t in h.tensors.values():
        at = t.info_offset
        nd = at + 8 + len(t.name.encode())
        out += [(at, 8), (nd, 4)] + [(nd + 4 + 8 * d, 8) for d in range(len(t.ne))]
        out += [(nd + 4 + 8 * len(t.ne), 4), (nd + 8 + 8 * len(t.ne), 8)]  # ggml type, data offset
    def keep(fields):
        return [(o, w) for o, w in fields if prefix is None or o + w <= prefix]

    return keep(counts + out), keep(counts)


def mutations(n_bytes: int, header_end: int, fields: list[tuple[int, int]], counts: list[tuple[int, int]]):
    at = st.one_of(st.integers(0, max(header_end - 1, 0)), st.integers(0, n_bytes - 1))
    field = st.one_of(st.sampled_from(counts), st.sampled_from(fields))
    return st.lists(st.one_of(
        st.tuples(st.just("cut"), st.integers(0, n_bytes - 1)),
        st.tuples(st.just("flip"), at, st.integers(0, 7)),
        st.tuples(st.just("write"), at, st.binary(min_size=1, max_size=8)),
        st.tuples(st.just("splice"), field, st.one_of(st.sampled_from(BIG), st.integers(0, (1 << 64) - 1))),
    ), min_size=1, max_size=4)


def apply(base: bytes, ops) -> bytes:
    b = bytearray(base)
    for op in ops:
        if op[0] == "cut":
            del b[op[1]:]
        elif op[0] == "flip" and op[1] < len(b):
            b[op[1]] ^= 1 << op[2]
        elif op[0] == "write" and op[1] < len(b):
            b[op[1] : op[1] + len(op[2])] = op[2][: len(b) - op[1]]
        elif op[0] == "splice":
            (o, width), v = op[1], op[2]
            if o + width <= len(b):
                b[o : o + width] = (v & ((1 << 8 * width) - 1)).to_bytes(width, "little")
    return bytes(b)


def outside(e: BaseException) -> bool:
    """A ValueError from one of the OUTSIDE raise sites."""
    if type(e) is not ValueError:
        return False
    tb = traceback.extract_tb(e.__traceback__)
    return bool(tb) and any(re.search(f, tb[-1].filename) and re.search(m, str(e)) for f, m in OUTSIDE)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--prefix", type=int, default=None, help="mutate only the first PREFIX bytes")
    ap.add_argument("--load", action="store_true", help="Model.load the files that parse")
    ap.add_argument("--headroom-mib", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--sweep", action="store_true", help="every cut and every inverted header byte")
    ap.add_argument("--selftest-alloc-mib", type=int, default=0,
                    help="only check that allocating this much fails under the cap")
    a = ap.parse_args()
    logging.disable(logging.CRITICAL)
    os.environ["LLAMAPY_TOKENIZER_CACHE"] = "0"  # no cache entry per mutated vocabulary
    base = a.base.read_bytes() if a.prefix is None else a.base.open("rb").read(a.prefix)
    tmp = Path(tempfile.mkdtemp(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    atexit.register(shutil.rmtree, tmp, True)
    case = tmp / "case.gguf"
    if a.load:
        import torch

        from llamapy.model.model import Model

        torch.set_num_threads(1)
        Model.load(a.base, device="cpu")  # the intact file loads; its imports and kernels are in
    fields, counts = field_offsets(a.base, a.prefix)
    header_end = max(o + w for o, w in fields)
    run_seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    limit = cap_memory(a.headroom_mib << 20)
    report = {"base": str(a.base), "bytes": len(base), "cases": 0, "outcomes": {}, "rlimit_as": limit,
              "seed": run_seed, "failure": None}
    if a.selftest_alloc_mib:
        try:
            bytearray(a.selftest_alloc_mib << 20)
            report["selftest"] = "allocated"
        except MemoryError:
            report["selftest"] = "MemoryError"
        a.out.write_text(json.dumps(report))
        return 0
    outcomes = report["outcomes"]
    last: list = []

    def on_alarm(signum, frame):
        raise Hang("a case ran for more than 20 s")

    signal.signal(signal.SIGALRM, on_alarm)

    def one(data: bytes) -> None:
        report["cases"] += 1
        case.write_bytes(data)
        signal.alarm(20)
        try:
            kind = run_case(case, a.load)
        finally:
            signal.alarm(0)
        outcomes[kind] = outcomes.get(kind, 0) + 1

    if a.sweep:
        t0 = time.perf_counter()
        data_offset = GGUFHeader(a.base).data_offset
        try:
            for n in range(data_offset + 1):
                last[:] = [("cut", n)]
                one(base[:n])
            for i in range(data_offset):
                last[:] = [("flip", i, "0xff")]
                one(base[:i] + bytes([base[i] ^ 0xFF]) + base[i + 1 :])
        except BaseException as e:
            report["failure"] = {"error": f"{type(e).__name__}: {e}"[:2000], "mutation": repr(last[0]),
                                 "traceback": traceback.format_exc()[-4000:]}
        report["seconds"] = round(time.perf_counter() - t0, 2)
        a.out.write_text(json.dumps(report))
        return 0

    @seed(run_seed)
    @settings(max_examples=a.examples, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(mutations(len(base), header_end, fields, counts))
    def prop(ops) -> None:
        last[:] = [ops]
        one(apply(base, ops))

    t0 = time.perf_counter()
    try:
        prop()
    except BaseException as e:  # the shrunk failing case: hypothesis re-raises it
        report["failure"] = {"error": f"{type(e).__name__}: {e}"[:2000], "mutation": repr(last[0] if last else None)[:2000],
                             "traceback": traceback.format_exc()[-4000:]}
    report["seconds"] = round(time.perf_counter() - t0, 2)
    a.out.write_text(json.dumps(report))
    return 0


def run_case(path: Path, load: bool) -> str:
    """'ok', 'parse' (GGUFError from the header walk or the hparams checks), 'load'
    (GGUFError from Model.load) or 'outside' (see OUTSIDE); anything else raises."""
    try:
        f = GGUFFile(path)
        hparams_from_gguf(f)
    except GGUFError as e:
        check_message(e, path)
        return "parse"
    del f
    if not load:
        return "ok"
    from llamapy.model.model import Model

    try:
        Model.load(path, device="cpu")
    except GGUFError as e:
        check_message(e, path)
        return "load"
    except ValueError as e:
        if outside(e):
            return "outside"
        raise
    return "ok"


def check_message(e: GGUFError, path: Path) -> None:
    msg = str(e)
    if path.name not in msg or not MESSAGE.search(msg):
        raise AssertionError(f"GGUFError without the file and a byte offset or missing key: {msg!r}")


if __name__ == "__main__":
    sys.exit(main())
