"""llama-bench's printers: csv, json, jsonl and markdown, with its field names, value
formats and column widths; llamapy adds EXTRA_FIELDS after llama-bench's own."""
from __future__ import annotations

from typing import TextIO

from .llama_bench import FA_VALUES, BenchParams, TestResult

# test::get_fields(), in order
FIELDS = (
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends",
    "model_filename", "model_type", "model_size", "model_n_params", "n_batch",
    "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode",
    "main_gpu", "no_kv_offload", "flash_attn", "devices", "tensor_split",
    "tensor_buft_overrides", "load_mode", "lazy_mode",
    "embeddings",
    "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx",
    "n_prompt", "n_gen", "n_depth",
    "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
)
# llamapy: resolved KV cells, reserved compute buffer, kernel ISA; speculative decoding in tg
EXTRA_FIELDS = ("n_ctx", "compute_bytes", "cpu_isa", "spec_type", "n_drafted", "n_accepted", "n_verify",
                "ubatches_per_verify")
_INT = {"build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params", "n_gpu_layers",
        "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "no_op_offload", "n_cpu_moe",
        "fit_target", "fit_min_ctx", "flash_attn", "n_ctx", "compute_bytes", "n_drafted", "n_accepted", "n_verify"}
_BOOL = {"no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack"}
_FLOAT = {"avg_ts", "stddev_ts", "ubatches_per_verify"}
MiB = 1024 * 1024


def values(r: TestResult) -> dict[str, str]:
    """test::get_values(): every field as llama-bench's std::to_string would write it."""
    i = r.inst
    v = {
        "build_commit": "llamapy", "build_number": "0", "cpu_info": r.cpu_info, "gpu_info": r.gpu_info,
        "backends": r.backend, "model_filename": r.model_filename, "model_type": r.model_type,
        "model_size": str(r.model_size), "model_n_params": str(r.model_n_params), "n_batch": str(i.n_batch),
        "n_ubatch": str(i.n_ubatch), "n_threads": str(i.n_threads), "cpu_mask": "0x0", "cpu_strict": "0",
        "poll": "50", "type_k": i.type_k, "type_v": i.type_v, "n_gpu_layers": "-1",
        "n_cpu_moe": "0", "split_mode": "layer", "main_gpu": "0", "no_kv_offload": str(int(i.no_kv_offload)),
        "flash_attn": str(FA_VALUES.get(i.flash_attn, -1)), "devices": "auto", "tensor_split": "0.00",
        "tensor_buft_overrides": "none", "load_mode": "auto", "lazy_mode": "auto", "embeddings": "0",
        "no_op_offload": "0", "no_host": "0", "repack": "0", "fit_target": "0", "fit_min_ctx": "0",
        "n_prompt": str(i.n_prompt), "n_gen": str(i.n_gen), "n_depth": str(i.n_depth), "test_time": r.test_time,
        "avg_ns": str(r.avg_ns()), "stddev_ns": str(r.stddev_ns()), "avg_ts": f"{r.avg_ts():f}",
        "stddev_ts": f"{r.stddev_ts():f}", "n_ctx": str(r.n_ctx), "compute_bytes": str(r.compute_bytes),
        "cpu_isa": r.cpu_isa, "spec_type": r.spec_type, "n_drafted": str(r.n_drafted), "n_accepted": str(r.n_accepted),
        "n_verify": str(r.n_verify), "ubatches_per_verify": f"{r.ubatches_per_verify():f}",
    }
    return v


def _json_value(field: str, value: str) -> str:
    if field in _INT or field in _FLOAT:
        return value
    if field in _BOOL:
        return "false" if value == "0" else "true"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _samples(r: TestResult) -> tuple[str, str]:
    return ", ".join(str(t) for t in r.samples_ns), ", ".join(f"{t:g}" for t in r.samples_ts())


class Printer:
    def __init__(self, fout: TextIO) -> None:
        self.fout = fout

    def header(self, p: BenchParams) -> None:
        pass

    def test(self, r: TestResult) -> None:
        raise NotImplementedError

    def footer(self) -> None:
        pass


class CsvPrinter(Printer):
    def header(self, p: BenchParams) -> None:
        self.fout.write(",".join(FIELDS + EXTRA_FIELDS) + "\n")

    def test(self, r: TestResult) -> None:
        v = values(r)
        self.fout.write(",".join('"' + v[f].replace('"', '""') + '"' for f in FIELDS + EXTRA_FIELDS) + "\n")


class JsonPrinter(Printer):
    first = True

    def header(self, p: BenchParams) -> None:
        self.fout.write("[\n")

    def test(self, r: TestResult) -> None:
        if not self.first:
            self.fout.write(",\n")
        self.first = False
        v = values(r)
        ns, ts = _samples(r)
        self.fout.write("  {\n")
        for f in FIELDS + EXTRA_FIELDS:
            self.fout.write(f'    "{f}": {_json_value(f, v[f])},\n')
        self.fout.write(f'    "samples_ns": [ {ns} ],\n    "samples_ts": [ {ts} ]\n  }}')
        self.fout.flush()

    def footer(self) -> None:
        self.fout.write("\n]\n")


class JsonlPrinter(Printer):
    def test(self, r: TestResult) -> None:
        v = values(r)
        ns, ts = _samples(r)
        body = "".join(f'"{f}": {_json_value(f, v[f])}, ' for f in FIELDS + EXTRA_FIELDS)
        self.fout.write("{" + body + f'"samples_ns": [ {ns} ],"samples_ts": [ {ts} ]' + "}\n")
        self.fout.flush()


# markdown: (field, display name, width); negative width = left-aligned
_MD_OPTIONAL = (("n_batch", "n_batch", 7, [2048]), ("n_ubatch", "n_ubatch", 8, [512]), ("type_k", "type_k", 6, ["f16"]),
                ("type_v", "type_v", 6, ["f16"]), ("no_kv_offload", "nkvo", 4, [False]), ("flash_attn", "fa", 3, ["auto"]),
                ("n_ctx", "n_ctx", 6, [0]))


class MarkdownPrinter(Printer):
    """`model | size | params | backend | threads | <options that differ from the defaults> |
    test | t/s | compute MiB`."""

    def header(self, p: BenchParams) -> None:
        self.cols: list[tuple[str, str, int]] = [("model", "model", -30), ("size", "size", 10),
                                                 ("params", "params", 10), ("backend", "backend", -10),
                                                 ("n_threads", "threads", 7)]
        for field, name, width, default in _MD_OPTIONAL:
            if getattr(p, field) != default:
                self.cols.append((field, name, width))
        self.cols += [("test", "test", 15), ("t/s", "t/s", 20), ("compute", "compute MiB", 11)]
        if p.spec is not None and p.spec.type != "none":  # drafts: acceptance and ubatches per verification
            self.cols += [("spec_type", "spec", -12), ("accepted", "accepted", 14), ("ub_verify", "ub/verif", 8)]
        self.fout.write("|" + "".join(f" {_pad(name, w)} |" for _, name, w in self.cols) + "\n")
        self.fout.write("|" + "".join(f" {'-' * (abs(w) - 1)}{':' if w > 0 else '-'} |" for _, _, w in self.cols) + "\n")

    def test(self, r: TestResult) -> None:
        v = values(r)
        cells = []
        for field, _, w in self.cols:
            if field == "model":
                s = r.model_type
            elif field == "size":
                s = f"{r.model_size / MiB:.2f} MiB" if r.model_size < 1024 * MiB else f"{r.model_size / MiB / 1024:.2f} GiB"
            elif field == "params":
                s = f"{r.model_n_params / 1e6:.2f} M" if r.model_n_params < 1e9 else f"{r.model_n_params / 1e9:.2f} B"
            elif field == "backend":
                s = r.backend
            elif field == "test":
                s = r.inst.test_name
            elif field == "t/s":
                s = f"{r.avg_ts():.2f} ± {r.stddev_ts():.2f}"
            elif field == "compute":
                s = f"{r.compute_bytes / MiB:.2f}"
            elif field == "flash_attn":
                s = r.inst.flash_attn
            elif field == "accepted":
                s = f"{r.n_accepted}/{r.n_drafted}" if r.n_drafted else "-"
            elif field == "ub_verify":
                s = f"{r.ubatches_per_verify():.2f}" if r.n_verify else "-"
            else:
                s = v[field]
            cells.append(f" {_pad(s, w)} |")
        self.fout.write("|" + "".join(cells) + "\n")
        self.fout.flush()

    def footer(self) -> None:
        self.fout.write("\nbuild: llamapy (0)\n")


def _pad(s: str, width: int) -> str:
    return s.ljust(-width) if width < 0 else s.rjust(width)


PRINTERS = {"md": MarkdownPrinter, "csv": CsvPrinter, "json": JsonPrinter, "jsonl": JsonlPrinter}


def make_printer(fmt: str, fout: TextIO) -> Printer:
    if fmt not in PRINTERS:
        raise ValueError(f"unknown output format '{fmt}' (-o): use one of {', '.join(PRINTERS)}")
    return PRINTERS[fmt](fout)
