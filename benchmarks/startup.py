"""Cold start, side by side with llama.cpp (issue 18), on each model, in one run:

  Model.load                 vs llama-completion's `load time` line      target <= 2x
  `llamapy run -n 1`         vs `llama-completion -n 1`                   target <= llama.cpp + import torch + 0.5 s
  `llamapy serve` to /health vs `llama-server` to /health 200             target <= llama.cpp + import torch + 0.5 s
  `llamapy tokenize`         vs `llama-tokenize`                          target <= llama.cpp + 0.5 s
  `llamapy mem -c 8192`      (header only; llama.cpp has no such tool)    target <= 0.5 s
  peak RSS of `run -n 1`     vs llama-completion's (wait4's ru_maxrss)    information
  Model.load's VmRSS growth and VmHWM above its start                    target <= 1.1x file, 1.1x file + 64 MiB

Wall times are medians of --reps runs (the page cache warm: every tool runs once first), each
command in a fresh process with -t/--threads threads; servers listen on 127.0.0.1 at a free
port.  `import torch` is measured on this machine, in a fresh interpreter.

    .venv/bin/python benchmarks/startup.py                     # smollm2-135m and gemma3-270m
    .venv/bin/python benchmarks/startup.py -m smollm2-135m -r 5 --llamacpp-bin DIR
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CACHE = Path.home() / ".cache/llamacpp-ref/llama.cpp"
PROMPT = "The capital of France is"
PY = sys.executable


TOOLS = ("llama-completion", "llama-server", "llama-tokenize")


def default_bin() -> Path:
    """build-llamacpp.sh's output: the native build, else the AVX2 one (the first that has
    every tool this script runs)."""
    for sub in ("build/bin", "build-avx2/bin"):
        if all((CACHE / sub / tool).exists() for tool in TOOLS):
            return CACHE / sub
    return CACHE / "build/bin"


@dataclass(slots=True)
class Run:
    wall: float
    out: str
    maxrss: int  # bytes


def run(cmd: list[str]) -> Run:
    """One command: wall time, its output, and its own peak RSS (the child reaped with wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out = p.stdout.read() if p.stdout else b""
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{out.decode(errors='replace')[-2000:]}")
    return Run(wall, out.decode(errors="replace"), ru.ru_maxrss * 1024)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_health(cmd: list[str], port: int, timeout: float = 300) -> float:
    """Seconds from starting a server to its first /health 200; then it is stopped."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        while time.perf_counter() - t0 < timeout:
            if p.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode} before /health answered 200")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.01)
        raise RuntimeError(f"{' '.join(cmd)}: no /health 200 within {timeout} s")
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def import_torch() -> float:
    code = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
    return float(run([PY, "-c", code]).out.strip().splitlines()[-1])


LOAD = """import sys, time
import torch
from llamapy.kernels import load_kernels
load_kernels()
from llamapy.model.model import Model
import llamapy.tokenizer

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key))

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
rss0 = status("VmRSS")
t = time.perf_counter()
Model.load(sys.argv[1], device="cpu")
print("MODEL_LOAD", time.perf_counter() - t, status("VmRSS") - rss0, status("VmHWM") - rss0)
"""


def model_load(path: Path) -> tuple[float, int, int]:
    """Seconds, VmRSS growth and VmHWM above the start (bytes) of Model.load in a fresh
    process that has imported torch and loaded the kernels first."""
    out = run([PY, "-c", LOAD, str(path)]).out
    m = re.search(r"MODEL_LOAD ([\d.]+) (\d+) (\d+)", out)
    return float(m.group(1)), int(m.group(2)), int(m.group(3))


def cpp_load_ms(out: str) -> float:
    m = re.search(r"load time\s*=\s*([\d.]+) ms", out)
    if m is None:
        raise RuntimeError(f"no 'load time = ... ms' line in llama-completion's output:\n{out[-2000:]}")
    return float(m.group(1))


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def measure(model: Path, bin_dir: Path, reps: int, threads: int) -> dict[str, tuple[float | None, float]]:
    """metric -> (llama.cpp, llamapy) medians."""
    t = str(threads)
    comp = [str(bin_dir / "llama-completion"), "-m", str(model), "-p", PROMPT, "-n", "1", "-t", t, "--temp", "0", "-no-cnv"]
    pyrun = [PY, "-m", "llamapy", "run", "-m", str(model), "-p", PROMPT, "-n", "1", "-t", t, "--temp", "0"]
    tok_c = [str(bin_dir / "llama-tokenize"), "-m", str(model), "-p", "Hello world"]
    tok_p = [PY, "-m", "llamapy", "tokenize", "-m", str(model), "-p", "Hello world"]
    mem_p = [PY, "-m", "llamapy", "mem", "-m", str(model), "-c", "8192"]
    for cmd in (comp, pyrun, tok_c, tok_p, mem_p):  # warm the page cache and every build cache
        run(cmd)
    res: dict[str, list[list[float]]] = {}

    def add(name: str, cpp: float | None, py: float) -> None:
        res.setdefault(name, [[], []])
        if cpp is not None:
            res[name][0].append(cpp)
        res[name][1].append(py)

    for _ in range(reps):
        c = run(comp)
        p = run(pyrun)
        secs, growth, peak = model_load(model)
        add("Model.load (s)", cpp_load_ms(c.out) / 1000, secs)
        add("Model.load RSS growth (MiB)", None, growth / 2**20)
        add("Model.load RSS peak (MiB)", None, peak / 2**20)
        add("run -n 1 (s)", c.wall, p.wall)
        add("run -n 1 peak RSS (MiB)", c.maxrss / 2**20, p.maxrss / 2**20)
        port = free_port()
        cs = to_health([str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                        "-t", t], port)
        port = free_port()
        ps = to_health([PY, "-m", "llamapy", "serve", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                        "-t", t], port)
        add("serve to /health 200 (s)", cs, ps)
        add("tokenize 'Hello world' (s)", run(tok_c).wall, run(tok_p).wall)
        add("mem -c 8192 (s)", None, run(mem_p).wall)
    return {k: (median(v[0]) if v[0] else None, median(v[1])) for k, v in res.items()}


def target(metric: str, cpp: float | None, py: float, torch_s: float, file_mib: float) -> tuple[str, bool | None]:
    if metric.startswith("Model.load (s)"):
        return "<= 2x", py <= 2 * cpp
    if metric.startswith("Model.load RSS growth"):
        return f"<= {1.1 * file_mib:.0f} (1.1x file)", py <= 1.1 * file_mib
    if metric.startswith("Model.load RSS peak"):
        return f"<= {1.1 * file_mib + 64:.0f} (1.1x + 64)", py <= 1.1 * file_mib + 64
    if metric.startswith(("run -n 1 (s)", "serve")):
        bound = cpp + torch_s + 0.5
        return f"<= {bound:.2f} s", py <= bound
    if metric.startswith("tokenize"):
        return f"<= {cpp + 0.5:.2f} s", py <= cpp + 0.5
    if metric.startswith("mem"):
        return "<= 0.50 s", py <= 0.5
    return "", None


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="registered name or .gguf path (repeatable; "
                                                             "default: smollm2-135m and gemma3-270m)")
    ap.add_argument("--llamacpp-bin", type=Path, default=Path(os.environ.get("LLAMACPP_BIN", default_bin())))
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args(argv)
    for tool in TOOLS:
        if not (a.llamacpp_bin / tool).exists():
            raise SystemExit(f"no {tool} in {a.llamacpp_bin}: build it (../shared/tools/build-llamacpp.sh) "
                             f"or pass --llamacpp-bin")
    from llamapy.registry import resolve_model

    models = [resolve_model(m) for m in (a.model or ["smollm2-135m", "gemma3-270m"])]
    torch_s = median([import_torch() for _ in range(a.reps)])
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, -t {a.threads}; llama.cpp: {a.llamacpp_bin}; "
          f"median of {a.reps}; import torch = {torch_s:.2f} s")
    print(f"| model | metric | llama.cpp | llamapy | ratio | target | met |")
    print("|---|---|---:|---:|---:|---|---|")
    ok_all = True
    for path in models:
        file_mib = path.stat().st_size / 2**20
        for metric, (cpp, py) in measure(path, a.llamacpp_bin, a.reps, a.threads).items():
            tgt, ok = target(metric, cpp, py, torch_s, file_mib)
            ok_all &= ok is not False
            ratio = f"{py / cpp:.2f}x" if cpp else ""
            c = "" if cpp is None else f"{cpp:.2f}" if "MiB" not in metric else f"{cpp:.0f}"
            p = f"{py:.2f}" if "MiB" not in metric else f"{py:.0f}"
            print(f"| {path.stem} | {metric} | {c} | {p} | {ratio} | {tgt} | {'' if ok is None else 'yes' if ok else 'NO'} |",
                  flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
