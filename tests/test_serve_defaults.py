"""llama-server's serve flags as it spells them: --temp, --top-k, --top-p, --min-p, --seed,
-n/--n-predict as the default of every request that does not set them; --alias in
/v1/models and responses; --no-webui, --offline, --jinja accepted; --no-jinja, --chat-template*
read into ServeSettings.chat; any other
flag llamapy cannot honour refused naming it."""
from __future__ import annotations

import signal
from dataclasses import replace

import httpx
import pytest
from server_harness import serving_state, asgi_call as _call

from llamapy.cli import build_parser
from llamapy.cli.serve import serve_settings
from llamapy.server.request_defaults import RequestDefaults
from llamapy.server.schemas import ChatCompletionRequest, CompletionRequest, NativeCompletionRequest

HI = [{"role": "user", "content": "hi"}]


def _settings(*flags: str):
    return serve_settings(build_parser().parse_args(["serve", *flags]))


def test_flags_become_request_defaults():
    s = _settings("--temp", "0.5", "--top-k", "7", "--top-p", "0.9", "--min-p", "0.1", "-s", "42", "-n", "5", "--alias", "foo")
    assert s.defaults == RequestDefaults(temperature=0.5, top_k=7, top_p=0.9, min_p=0.1, seed=42, n_predict=5)
    assert s.alias == "foo"
    assert _settings("--temperature", "0", "--predict", "3").defaults == RequestDefaults(temperature=0.0, n_predict=3)
    assert _settings("--n-predict", "-1").defaults.n_predict == -1
    assert _settings().defaults == RequestDefaults()  # unset: each request's own default, as before
    with pytest.raises(ValueError, match=r"--top-p \(2\) must be in"):
        _settings("--top-p", "2")


def test_accepted_flags_change_nothing():
    assert _settings("--offline", "--jinja") == _settings()


def test_no_webui_turns_the_pages_off():
    """llama-server's --no-webui (and its alias --no-ui): the only setting they change."""
    for flag in ("--no-webui", "--no-ui"):
        assert _settings(flag) == replace(_settings(), webui=False) and _settings().webui is True


def test_jinja_flags():
    assert _settings("--no-jinja").chat.use_jinja is False and _settings().chat.use_jinja is True
    assert _settings("--chat-template-kwargs", '{"enable_thinking": false}').chat.template_kwargs == {"enable_thinking": False}
    assert _settings("--chat-template", "chatml").chat.template.startswith("{%- for message in messages")
    with pytest.raises(ValueError, match="--chat-template-kwargs: expected a JSON object"):
        _settings("--chat-template-kwargs", "[1]")
    with pytest.raises(ValueError, match="--chat-template 'nope': not a built-in name"):
        _settings("--chat-template", "nope")


@pytest.mark.parametrize("flag", ["--webui"])
def test_flags_llamapy_cannot_honour_are_named(flag, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["serve", flag])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and ("unsupported by llamapy" in err or "llamapy does not read that flag" in err), err


def test_apply_only_fills_what_the_request_did_not_send():
    d = RequestDefaults(temperature=0.0, top_k=3, seed=9, n_predict=5)
    c = d.apply(CompletionRequest(prompt="x", temperature=1.5))
    assert (c.temperature, c.top_k, c.seed, c.max_tokens, c.top_p) == (1.5, 3, 9, 5, 0.95)
    assert d.apply(CompletionRequest(prompt="x", max_tokens=2)).max_tokens == 2
    assert d.apply(CompletionRequest(prompt="x", max_tokens=-1)).max_tokens == 5  # -1 takes -n (server-context.cpp)
    assert d.apply(ChatCompletionRequest(messages=HI)).n_predict() == 5
    assert d.apply(ChatCompletionRequest(messages=HI, max_completion_tokens=4)).n_predict() == 4
    assert d.apply(ChatCompletionRequest(messages=HI, max_completion_tokens=-1, max_tokens=7)).n_predict() == 5
    assert d.apply(NativeCompletionRequest(prompt="x")).n_predict == 5
    assert d.apply(NativeCompletionRequest(prompt="x", seed=-1)).seed == -1  # sent: random, as asked
    assert CompletionRequest(prompt="x").max_tokens == 16 and RequestDefaults().apply(CompletionRequest(prompt="x")).max_tokens == 16


@pytest.fixture(scope="module")
def state(tiny):
    with serving_state(tiny, n_ctx=1024, np_=2, n_batch=64) as st:
        yield st


def test_n_predict_limits_requests_without_max_tokens(state):
    state.defaults = RequestDefaults(n_predict=5)
    try:
        r = _call(state, "POST", "/v1/completions", json={"prompt": "hello", "ignore_eos": True})
        assert r.json()["usage"]["completion_tokens"] == 5
        r = _call(state, "POST", "/v1/chat/completions", json={"messages": HI, "ignore_eos": True})
        assert r.json()["usage"]["completion_tokens"] == 5
        r = _call(state, "POST", "/completion", json={"prompt": "hello", "ignore_eos": True})
        assert r.json()["tokens_predicted"] == 5 and r.json()["generation_settings"]["n_predict"] == 5
        r = _call(state, "POST", "/v1/completions", json={"prompt": "hello", "ignore_eos": True, "max_tokens": 2})
        assert r.json()["usage"]["completion_tokens"] == 2  # the request's own wins
        assert _call(state, "GET", "/props").json()["default_generation_settings"]["params"]["n_predict"] == 5
    finally:
        state.defaults = RequestDefaults()


def test_temp_and_seed_make_sampled_requests_identical(state):
    body = {"prompt": "hello", "max_tokens": 12, "ignore_eos": True}

    def text(d: RequestDefaults, **kw) -> str:
        state.defaults = d
        try:
            return _call(state, "POST", "/v1/completions", json=body | kw).json()["choices"][0]["text"]
        finally:
            state.defaults = RequestDefaults()

    hot = RequestDefaults(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=1234)
    a, b = text(hot), text(hot)
    assert a == b  # one server seed: the same draw every time
    other = [text(RequestDefaults(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=s)) for s in (1, 2, 3)]
    assert any(t != a for t in other)  # the seed (and the temperature) reached the sampler
    assert text(hot, seed=1) == other[0]  # a request's own seed wins
    greedy = text(RequestDefaults(temperature=0.0, seed=7))
    assert greedy == text(RequestDefaults(), temperature=0.0)  # --temp 0: greedy
    params = _call(state, "GET", "/props").json()["default_generation_settings"]["params"]
    assert params["temperature"] == 0.8  # unset: llama-server's defaults, as before


def test_serve_process_alias_and_defaults(tiny_path):
    """The flags through the real `llamapy serve`: --alias in /v1/models and responses, -n 3
    and --temp 0 applied to a request that sets neither."""
    from test_server_cli import _start

    proc, base, _ = _start(["-m", str(tiny_path), "-c", "512", "-np", "1", "--port", "0", "-t", "1", "--alias", "foo",
                            "-n", "3", "--temp", "0", "--seed", "5", "--no-webui", "--offline", "--jinja"])
    try:
        with httpx.Client(base_url=base, timeout=60) as c:
            assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["foo"]
            r = c.post("/v1/completions", json={"prompt": "hello", "ignore_eos": True}).json()
            assert r["model"] == "foo" and r["usage"]["completion_tokens"] == 3
            r2 = c.post("/v1/completions", json={"prompt": "hello", "ignore_eos": True, "temperature": 0, "max_tokens": 3}).json()
            assert r2["choices"][0]["text"] == r["choices"][0]["text"]
            assert c.post("/v1/chat/completions", json={"messages": HI}).json()["model"] == "foo"
            g = c.post("/completion", json={"prompt": "hello"}).json()
            assert g["model"] == "foo" and g["generation_settings"]["temperature"] == 0 and g["generation_settings"]["seed"] == 5
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
