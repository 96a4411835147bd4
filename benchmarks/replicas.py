#!/usr/bin/env python3
"""Replicas on Ray Serve against one server, on this machine:

  load   the 32-stream load of benchmarks/server_load.py (prompts of 20-160 words, 64 tokens
         each, 8 at a time): `llamapy serve -np 8 -c 8192 -t 2` (1 replica x 2 threads) against
         `llamapy serve --replicas 2 -np 4 -c 4096 -t 1` (2 replicas x 1 thread: the same slots,
         cells and cores in all); tokens/s, TTFT p50 / p99
  chat   --conversations chats of --turns turns (a distinct system prompt each, short answers),
         each round's turns in a shuffled order, --chat-concurrency at a time, on 2 replicas
         with prefix affinity and with round-robin, each replica with -np 4 and with -np 8
         slots (12 conversations fit 2 x 8 slots, not 2 x 4): the later turns that found
         their conversation's previous turn in the cache, and the prefill tokens the cache
         saved (sum of cache_n / sum of prompt tokens)

    .venv/bin/python benchmarks/replicas.py -m smollm2-135m
Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from isa_env import cpu_model  # noqa: E402
from server_load import LoadSpec, drive, free_port, make_prompts, serving  # noqa: E402

TOPICS = ["rivers", "bicycles", "tea", "volcanoes", "chess", "bees", "lighthouses", "maps", "glaciers", "violins",
          "orchards", "comets", "bridges", "owls", "deserts", "clocks"]


def serve_cmd(model: str, port: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "llamapy", "serve", "-m", model, "--host", "127.0.0.1", "--port", str(port), *extra]


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) >= 2 else (xs[0] if xs else float("nan"))


def load(model: str, extra: list[str], name: str, spec: LoadSpec) -> dict:
    port = free_port()
    with serving(serve_cmd(model, port, extra), port, None, name, spec.ready_timeout) as url:
        res = asyncio.run(drive(url, make_prompts(spec), spec, name))
    return {"name": name, "tok_s": res.tok_s, "ttft_p50": res.ttft_p50, "ttft_p99": p99(res.ttft_s),
            "errors": len(res.errors)}


async def _chat(url: str, n_conv: int, n_turn: int, concurrency: int, seed: int) -> dict:
    convs = [[{"role": "system", "content": f"You are a helpful assistant who knows a lot about {TOPICS[i % len(TOPICS)]}"
                                            f" (conversation {i})."}] for i in range(n_conv)]
    prev = [0] * n_conv
    rng = random.Random(seed)
    held = later = cached = prompt = 0
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300) as c:
        async def turn_of(i: int, t: int) -> None:
            nonlocal held, later, cached, prompt
            async with sem:
                convs[i].append({"role": "user", "content": f"Tell me fact number {t + 1} about {TOPICS[i % len(TOPICS)]}."})
                b = (await c.post("/v1/chat/completions",
                                  json={"messages": convs[i], "max_tokens": 16, "temperature": 0})).json()
            convs[i].append({"role": "assistant", "content": b["choices"][0]["message"]["content"]})
            n, p = b["timings"]["cache_n"], b["usage"]["prompt_tokens"]
            cached, prompt = cached + n, prompt + p
            if t > 0:
                later += 1
                held += n >= prev[i] - 2
            prev[i] = p

        for t in range(n_turn):
            order = list(range(n_conv))
            rng.shuffle(order)
            await asyncio.gather(*(turn_of(i, t) for i in order))
    return {"held": held, "later": later, "saved": cached / prompt if prompt else 0.0, "cached": cached, "prompt": prompt}


def chat(model: str, extra: list[str], name: str, a) -> dict:
    port = free_port()
    with serving(serve_cmd(model, port, extra), port, None, name, 300) as url:
        return {"name": name, **asyncio.run(_chat(url, a.conversations, a.turns, a.chat_concurrency, a.seed))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("-n", "--requests", type=int, default=32)
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--chat-concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chat-slots", default="4,8", help="-np of each replica in the chat runs")
    ap.add_argument("--skip-load", action="store_true")
    a = ap.parse_args()
    print(f"# {cpu_model()}; model {a.model}")
    if not a.skip_load:
        spec = replace(LoadSpec(), n_requests=a.requests)
        rows = [load(a.model, ["-c", "8192", "-np", "8", "-t", "2"], "1 replica x 2 threads (llamapy serve -t 2 -np 8)", spec),
                load(a.model, ["-c", "4096", "-np", "4", "-t", "1", "--replicas", "2"],
                     "2 replicas x 1 thread (--replicas 2 -t 1 -np 4)", spec)]
        print(f"\n{a.requests} streams of 64 tokens, 8 at a time:\n")
        print("| setup | tokens/s | TTFT p50 | TTFT p99 | errors |\n|---|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['name']} | {r['tok_s']:.1f} | {r['ttft_p50']:.2f} s | {r['ttft_p99']:.2f} s | {r['errors']} |")
    rows = []
    for np_ in a.chat_slots.split(","):
        flags = ["-c", str(1024 * int(np_)), "-np", np_, "-t", "1", "--replicas", "2"]
        rows += [chat(a.model, flags, f"affinity, -np {np_}", a),
                 chat(a.model, flags + ["--routing", "round-robin"], f"round-robin, -np {np_}", a)]
    print(f"\n{a.conversations} conversations x {a.turns} turns, {a.chat_concurrency} at a time, 2 replicas x 1 thread:\n")
    print("| routing, slots per replica | later turns with the previous turn cached | prefill tokens saved (cache_n / prompt) |")
    print("|---|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['held']} / {r['later']} ({r['held'] / r['later']:.0%}) | "
              f"{r['cached']} / {r['prompt']} ({r['saved']:.0%}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
