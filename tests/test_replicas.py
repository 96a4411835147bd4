"""`llamapy serve --replicas N` on Ray Serve (a local Ray on 127.0.0.1, 2 replicas x 1 thread,
SmolLM2, the official openai client): the same greedy outputs as one `llamapy serve`; prefix
affinity keeps a conversation's later turns on the replica that holds its cache (round-robin
measured beside it); a replica killed mid-load costs only the streams it was sending; a model
that cannot load fails the start-up with its own message."""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from server_harness import assert_same_or_near_tie

pytest.importorskip("ray.serve", reason="ray[serve] is a dev dependency: pip install -e '.[dev]'")

FLAGS = ["-c", "4096", "-np", "4", "-t", "1"]
PROMPTS = ["The capital of France is", "List the days of the week: Monday, Tuesday,", "def add(a, b):\n    return",
           "The three primary colors are", "Water boils at", "Once upon a time, in a small village, there lived",
           "The largest planet in the solar system is", "To make a cup of tea, first"]


class Server:
    """`llamapy serve` in a process of its own (its log in a file), until stop()."""

    def __init__(self, model: Path, extra: list[str], log: Path) -> None:
        self.log = log
        fh = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "llamapy", "serve", "-m", str(model), "--port", "0", *FLAGS,
                                     *extra], stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": ""})
        self.base = ""
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"^ready: (http://127\.0\.0\.1:\d+)$", log.read_text(), re.M)
            if m:
                self.base = m.group(1)
                return
            time.sleep(0.2)
        self.stop()
        raise AssertionError("no ready line:\n" + log.read_text()[-4000:])

    def client(self):
        from openai import OpenAI

        return OpenAI(base_url=f"{self.base}/v1", api_key="none", timeout=120, max_retries=0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def replicas(smollm2_path, tmp_path_factory):
    s = Server(smollm2_path, ["--replicas", "2", "--metrics"], tmp_path_factory.mktemp("ray") / "serve.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def single(smollm2_path, tmp_path_factory):
    s = Server(smollm2_path, [], tmp_path_factory.mktemp("one") / "serve.log")
    yield s
    s.stop()


def _complete_all(server: Server, prompts: list[str], max_tokens: int = 16, ignore_eos: bool = False) -> list[str]:
    c = server.client()
    extra = {"ignore_eos": True} if ignore_eos else None
    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        futs = [ex.submit(c.completions.create, model="m", prompt=p, max_tokens=max_tokens, temperature=0,
                          extra_body=extra) for p in prompts]
        return [f.result().choices[0].text for f in futs]


@pytest.mark.slow
def test_concurrent_greedy_identical_to_one_server(replicas, single):
    got = _complete_all(replicas, PROMPTS)
    want = _complete_all(single, PROMPTS)
    print(f"identical: {sum(g == w for g, w in zip(got, want))} of {len(got)}")
    assert_same_or_near_tie(single.base, PROMPTS, got, want, 16)
    m = httpx.get(f"{replicas.base}/metrics").text
    assert len(set(re.findall(r'replica_requests_routed_total\{replica="([^"]+)"', m))) == 2  # both replicas served


def _conversations(server: Server, n_conv: int = 6, n_turn: int = 4, seed: int = 0,
                   where: list | None = None) -> tuple[int, int, int]:
    """n_conv chats of n_turn turns, the turns of each round in a shuffled order; returns
    (later turns with cache_n > 0, later turns that found their conversation's previous prompt
    in the cache, later turns).  Every chat starts with the template's `<|im_start|>system`, so
    any replica that served any chat has a few tokens of every prompt: cache_n > 0 alone says
    little; the second count is the one affinity is for.  `where` gets each conversation's
    set of replicas."""
    topics = ["rivers", "bicycles", "tea", "volcanoes", "chess", "bees", "lighthouses", "maps"]
    convs = [[{"role": "system", "content": f"You are a helpful assistant who knows a lot about {topics[i]}."}]
             for i in range(n_conv)]
    rng = random.Random(seed)
    hits = held = later = 0
    prev = [0] * n_conv  # prompt tokens of each conversation's previous turn
    replicas = [set() for _ in range(n_conv)]
    for turn in range(n_turn):
        order = list(range(n_conv))
        rng.shuffle(order)
        for i in order:
            convs[i].append({"role": "user", "content": f"Tell me fact number {turn + 1} about {topics[i]}."})
            r = httpx.post(f"{server.base}/v1/chat/completions", timeout=120,
                           json={"messages": convs[i], "max_tokens": 12, "temperature": 0})
            body = r.json()
            replicas[i].add(r.headers["x-llamapy-replica"])
            convs[i].append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
            if turn > 0:
                later += 1
                hits += body["timings"]["cache_n"] > 0
                held += body["timings"]["cache_n"] >= prev[i] - 2  # its previous prompt (the edge may re-tokenize)
            prev[i] = body["usage"]["prompt_tokens"]
    if where is not None:
        where.extend(replicas)
    return hits, held, later


@pytest.mark.slow
def test_prefix_affinity_multi_turn(replicas, smollm2_path, tmp_path):
    where: list[set] = []
    hits, held, later = _conversations(replicas, where=where)
    assert all(len(w) == 1 for w in where)  # every conversation stayed on one replica
    per_replica = Counter(next(iter(w)) for w in where)
    assert sorted(per_replica.values()) == [3, 3]  # new conversations spread evenly
    rr = Server(smollm2_path, ["--replicas", "2", "--routing", "round-robin"], tmp_path / "rr.log")
    try:
        rr_hits, rr_held, rr_later = _conversations(rr)
    finally:
        rr.stop()
    print(f"later turns: cache_n > 0: affinity {hits}/{later}, round-robin {rr_hits}/{rr_later}; "
          f"previous turn cached: affinity {held}/{later}, round-robin {rr_held}/{rr_later}")
    assert hits >= 0.9 * later and held >= 0.9 * later
    assert rr_held < held  # the comparison: without affinity a turn often lands where its conversation is not
    m = httpx.get(f"{replicas.base}/metrics").text
    assert sum(float(v) for v in re.findall(r"replica_prompt_tokens_cached_total\{[^}]*\} (\S+)", m)) > 0


def _stream(base: str, prompt: str, max_tokens: int, started=None, info: dict | None = None) -> tuple[str, str, list[str]]:
    """(replica, text, error messages) of a streamed /v1/completions request; `started` (an
    Event) is set at the first text; info["replica"] is the replica as soon as it answers."""
    text, errors = "", []
    with httpx.stream("POST", f"{base}/v1/completions", timeout=180,
                      json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                            "ignore_eos": True}) as r:
        replica = r.headers.get("x-llamapy-replica", "")
        if info is not None:
            info["replica"] = replica
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                errors.append(ev["error"]["message"])
            else:
                text += ev["choices"][0]["text"]
                if started is not None and text:
                    started.set()
    return replica, text, errors


def _replica_pids(server: Server, n: int, exclude: str = "", timeout_s: float = 120) -> dict[str, str]:
    """{replica: pid} of n replicas other than `exclude`, as /metrics shows them once each has
    answered: short requests are sent until it does."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = httpx.get(f"{server.base}/metrics").text
        pids = {r: p for r, p in re.findall(r'replica_requests_total\{replica="([^"]+)",pid="(\d+)"\}', m) if r != exclude}
        if len(pids) >= n or time.monotonic() > deadline:
            return pids
        _complete_all(server, PROMPTS[:4], 2)


def _at_replicas(server: Server, since: float) -> int | None:
    """Requests running or queued at the replicas, summed from /metrics, once every replica's
    figures were taken at or after `since` (time.time()); None while one's are older (each
    /metrics call refreshes the replica that answers it)."""
    m = httpx.get(f"{server.base}/metrics").text

    def series(name: str) -> dict[str, float]:
        return {r: float(v) for r, v in re.findall(rf'llamapy:{name}\{{replica="([^"]+)",pid="\d+"\}} (\S+)', m)}

    age, busy, queued = series("replica_stats_age_seconds"), series("replica_requests_processing"), series("replica_queue_length")
    if not age or any(time.time() - a < since for a in age.values()):
        return None
    return int(sum(busy.values()) + sum(queued.values()))


@pytest.mark.slow
def test_replica_killed_mid_load(replicas, single):
    """4 streams and 4 plain requests in flight; once every stream has its first bytes, the
    process of a replica serving a stream still running is killed.  Plain requests (nothing
    sent yet) are retried on the other replica and complete; that stream, and any other the
    killed replica was still serving, ends with an error event; every other request completes
    unchanged (a stream the victim finished before it died among them); Ray brings the replica
    back."""
    import threading

    n_stream, n_plain = 320, 48  # (160 tokens ended before the plain requests reached a loaded 2-core host)
    want = _complete_all(single, PROMPTS[:4], n_stream, ignore_eos=True) + _complete_all(single, PROMPTS[4:], n_plain)
    base = replicas.base
    pids = _replica_pids(replicas, 2)
    c = replicas.client()
    with cf.ThreadPoolExecutor(8) as ex:
        started, infos = [threading.Event() for _ in range(4)], [{} for _ in range(4)]
        streams = [ex.submit(_stream, base, PROMPTS[i], n_stream, started[i], infos[i]) for i in range(4)]
        assert all(e.wait(60) for e in started)  # every stream has sent text to its client
        t_sent = time.time()
        plain = [ex.submit(c.completions.create, model="m", prompt=PROMPTS[i], max_tokens=n_plain, temperature=0)
                 for i in range(4, 8)]
        deadline = time.monotonic() + 60
        while True:  # the plain requests are at their replicas: every request in flight is counted there
            pending = sum(not f.done() for f in streams + plain)
            n = _at_replicas(replicas, t_sent)
            if n is not None and n >= pending:
                break
            assert time.monotonic() < deadline, f"the replicas hold {n} requests, {pending} are in flight"
            time.sleep(0.05)
        running = [i for i, f in enumerate(streams) if not f.done()]
        assert running  # 320 tokens each, EOS ignored: one is still streaming
        victim = infos[running[0]]["replica"]
        os.kill(int(pids[victim]), signal.SIGKILL)
        st = [f.result() for f in streams]
        pl = [f.result().choices[0].text for f in plain]
    assert_same_or_near_tie(single.base, PROMPTS[4:], pl, want[4:], n_plain)  # retried where needed: all complete, all unchanged
    cut = [i for i, (rep, _, err) in enumerate(st) if err]
    assert all(st[i][0] == victim and "was lost" in st[i][2][0] for i in cut)
    ok = [i for i, (_, _, err) in enumerate(st) if not err]
    assert_same_or_near_tie(single.base, [PROMPTS[i] for i in ok], [st[i][1] for i in ok], [want[i] for i in ok], n_stream, True)
    m = httpx.get(f"{base}/metrics").text
    retries = re.search(r"ingress_retries_total (\d+)", m).group(1)
    print(f"streams cut: {len(cut)} of 4 (on the killed replica: {sum(r == victim for r, _, _ in st)}); "
          f"plain requests retried on the other replica: {retries}; all 4 completed")
    assert running[0] in cut and all(st[i][0] == victim for i in cut)
    back = _replica_pids(replicas, 2, exclude=victim)  # Ray replaces the replica
    assert len(back) == 2 and pids[victim] not in back.values(), back


@pytest.mark.slow
def test_one_replica_identical_to_serve(smollm2_path, single, tmp_path):
    one = Server(smollm2_path, ["--replicas", "1"], tmp_path / "one.log")
    try:
        got = [one.client().completions.create(model="m", prompt=p, max_tokens=16, temperature=0).choices[0].text
               for p in PROMPTS[:4]]
        r1 = httpx.post(f"{one.base}/completion", json={"prompt": PROMPTS[0], "n_predict": 8, "temperature": 0}).json()
        m = httpx.get(f"{one.base}/metrics")  # as `serve` without --metrics
        assert m.status_code == 501 and "--metrics" in m.json()["error"]["message"]
    finally:
        one.stop()
    want = [single.client().completions.create(model="m", prompt=p, max_tokens=16, temperature=0).choices[0].text
            for p in PROMPTS[:4]]
    assert got == want
    r2 = httpx.post(f"{single.base}/completion", json={"prompt": PROMPTS[0], "n_predict": 8, "temperature": 0}).json()
    assert r1["content"] == r2["content"] and r1["tokens_predicted"] == r2["tokens_predicted"]


def test_bad_model_fails_startup_with_its_message(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    r = subprocess.run([sys.executable, "-m", "llamapy", "serve", "-m", str(bad), "--replicas", "2", "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "broken.gguf" in last
    assert "Traceback" not in r.stderr


def test_prefix_table_match_and_spread():
    """The router's table, without Ray: the longest shared prefix wins; new prompts go to the
    replica given the fewest prefixes."""
    from llamapy.replicas.affinity import BLOCK, PrefixTable, prefix_hashes as h, request_text

    t = PrefixTable()
    sys_a, sys_b = "A" * BLOCK * 2, "A" * BLOCK + "B" * BLOCK
    t.record("r1", h(sys_a + "turn one"))
    t.record("r2", h(sys_b + "x" * BLOCK))
    assert t.match(h(sys_a + "turn two, longer" * 8), ["r1", "r2"]) == (["r1"], 2)
    assert t.match(h(sys_b + "y" * BLOCK), ["r1", "r2"]) == (["r2"], 2)
    assert t.match(h("A" * BLOCK + "C" * BLOCK), ["r1", "r2"]) == (["r1", "r2"], 1)
    assert t.match(h("Z" * 3 * BLOCK), ["r1", "r2"]) == ([], 0) and t.match(h(sys_a), ["r2"])[0] == ["r2"]
    assert t.size("r2") > t.size("r1") and t.size("r3") == 0
    t.forget("r1")
    assert t.match(h(sys_a), ["r1", "r2"]) == (["r2"], 1)
    msgs = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "U"}]}]}
    assert request_text(msgs) == "<system>S<user>U" and request_text({"prompt": ["a", 5]}) == "a<5>"
