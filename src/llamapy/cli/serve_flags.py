"""`llamapy serve`'s flags that are llama-server's as it spells them (common/arg.cpp): the
server's default sampling settings for requests that do not set them (--temp, --top-k,
--top-p, --min-p, -s/--seed, -n/--n-predict, --n-probs; see server/request_defaults.py),
--no-webui, --log-disable, and flags accepted for llama-server's command lines that change nothing in llamapy
(--offline, --threads-http; --jinja and the chat-template flags are cli/chat_flags.py's).  A llama-server flag
llamapy cannot honour is refused naming it (argparse reports it as an unrecognized argument)."""
from __future__ import annotations

import argparse

from ..server.request_defaults import RequestDefaults


class Unsupported(argparse.Action):
    """A flag llama-server has and llamapy cannot honour: an error naming it, never a silent drop."""

    def __init__(self, option_strings, dest, why: str, **kw) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)
        self.why = why

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise argparse.ArgumentError(self, f"unsupported by llamapy: {self.why}")


def add_llama_server(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("request defaults (llama-server's): what a request does not set; "
                             "unset, each request's own default applies")
    g.add_argument("--temp", "--temperature", dest="temp", type=float, default=None,
                   help="temperature (llama-server's default: 0.80; 0 = greedy)")
    g.add_argument("--top-k", type=int, default=None, help="top-k sampling (default: 40, 0 = disabled)")
    g.add_argument("--top-p", type=float, default=None, help="top-p sampling (default: 0.95, 1.0 = disabled)")
    g.add_argument("--min-p", type=float, default=None, help="min-p sampling (default: 0.05, 0.0 = disabled)")
    g.add_argument("-s", "--seed", type=int, default=None, help="RNG seed (default: -1, a random seed per request)")
    g.add_argument("-n", "--predict", "--n-predict", dest="n_predict", type=int, default=None,
                   help="tokens to predict when a request sets no max_tokens / n_predict, or -1 (-1 = infinity; "
                        "unset: /v1/completions 16, the other routes no limit but the context)")
    g.add_argument("--n-probs", type=int, default=None, metavar="N",
                   help="/completion's and /infill's n_probs when a request sets none: the top N token probabilities "
                        "with each token (llama-server's default: 0 = none)")
    p.add_argument("--ctx-shift", "--context-shift", dest="ctx_shift", action="store_true", default=False,
                   help="context shift: a generation that fills its slot drops tokens after --keep and goes on "
                        "(default: off, as llama-server: it ends with finish_reason length)")
    p.add_argument("--no-context-shift", dest="ctx_shift", action="store_false",
                   help="no context shift (the default)")
    p.add_argument("--keep", type=int, default=0, metavar="N",
                   help="context shift: tokens kept from the start of the prompt (default: 0, -1 = all; BOS is kept besides)")
    p.add_argument("--cache-reuse", type=int, default=0, metavar="N",
                   help="prompt cache: reuse chunks of at least N cached tokens that moved (text cut out before them) by "
                        "shifting their KV (default: 0 = off; needs a cache that can shift)")
    p.add_argument("-cram", "--cache-ram", type=int, default=None, metavar="N",
                   help="host-memory prompt cache: a slot's KV cells about to be dropped are kept in RAM, up to N MiB, "
                        "and restored for a later prompt sharing their prefix (default: 8192, lowered to fit --mem-budget or free "
                        "memory, -1 - no limit, 0 - disable)")
    p.add_argument("--cache-idle-slots", action=argparse.BooleanOptionalAction, default=True,
                   help="save idle slots to the prompt cache when a request starts, and clear them when the KV cache is "
                        "unified (default: enabled, requires --cache-ram)")
    p.add_argument("--props", action="store_true", help="allow POST /props (default: off, 501)")
    p.add_argument("--slot-save-path", default=None, metavar="PATH",
                   help="folder for POST /slots/{id}?action=save|restore files (default: disabled; the slot actions answer 501)")
    p.add_argument("--no-webui", "--no-ui", dest="no_webui", action="store_true",
                   help="no web UI: / (the chat page) and /engine answer 404")
    p.add_argument("--cors-origins", default=None, metavar="ORIGINS",
                   help="Access-Control-Allow-Origin: '*' (default; 'localhost' with --tools), 'localhost' (reflect "
                        "localhost origins only) or one origin")
    p.add_argument("--cors-methods", default="GET, POST, DELETE, OPTIONS", metavar="METHODS",
                   help="Access-Control-Allow-Methods of a preflight (default: GET, POST, DELETE, OPTIONS)")
    p.add_argument("--cors-headers", default="*", metavar="HEADERS", help="Access-Control-Allow-Headers of a preflight (default: *)")
    p.add_argument("--cors-credentials", action=argparse.BooleanOptionalAction, default=True,
                   help="Access-Control-Allow-Credentials; with --cors-origins '*' the request's Origin is echoed (default: on)")
    p.add_argument("--ui-mcp-proxy", "--webui-mcp-proxy", dest="ui_mcp_proxy", action=argparse.BooleanOptionalAction,
                   default=False, help="experimental: /cors-proxy?url=URL forwards GET/POST to URL with only the "
                                       "x-llama-server-proxy-header-* headers (the web UI's MCP proxy) - do not enable in "
                                       "untrusted environments (default: disabled, 403)")
    p.add_argument("--tools", default=None, metavar="TOOL1,TOOL2,...",
                   help="experimental: llama-server's built-in tools for AI agents at GET/POST /tools - do not enable in "
                        "untrusted environments (default: no tools; \"all\": every one; available: " + ", ".join(BUILTIN_TOOLS)
                        + "); the CORS default becomes localhost (change via --cors-origins)")
    p.add_argument("--tools-runtime", default=None, metavar="OPTION",
                   help="llama-server's container/ssh runtime for --tools: not supported, llamapy runs tools on the host "
                        "(given: an error)")
    g = p.add_argument_group("accepted for llama-server's command lines")
    g.add_argument("-cb", "--cont-batching", action="store_true",
                   help="accepted, changes nothing: llamapy always batches continuously")
    g.add_argument("--threads-http", type=int, default=-1, metavar="N",
                   help="accepted, changes nothing: llama-server's HTTP worker threads; llamapy serves HTTP on one "
                        "asyncio event loop (uvicorn) and generates on the scheduler thread, whatever N")
    g.add_argument("--log-disable", action="store_true",
                   help="no log lines (llamapy's and uvicorn's); the `ready: URL` line on stdout stays")
    g.add_argument("--offline", action="store_true",
                   help="accepted, changes nothing: llamapy never downloads from a hub at serve time (`llamapy pull` does)")


BUILTIN_TOOLS = ("read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file", "edit_file", "get_info")


def server_tools(value: str | None) -> tuple[str, ...]:
    """--tools' comma-separated names, each one of BUILTIN_TOOLS or "all" (ValueError naming
    the unknown one and the available tools, as llama-server's server_tools::setup)."""
    names = tuple(n.strip() for n in (value or "").split(",") if n.strip())
    for n in names:
        if n != "all" and n not in BUILTIN_TOOLS:
            raise ValueError(f'--tools: unknown tool "{n}". available tools: {", ".join(BUILTIN_TOOLS)}')
    return names


def tools_runtime(value: str | None) -> None:
    """--tools-runtime: refused (ValueError naming it); llamapy runs the tools on the host only."""
    if value is not None:
        raise ValueError(f"--tools-runtime {value}: not supported; llamapy runs the --tools tools on the host only "
                         "(no docker:/podman: containers, no ssh:), drop the flag")


def cors_origins(origins: str | None, tools: tuple[str, ...]) -> str:
    """--cors-origins; unset: "*", or "localhost" when --tools is on (common/arg.cpp)."""
    if origins is not None:
        return origins
    return "localhost" if tools else "*"


def request_defaults(a: argparse.Namespace) -> RequestDefaults:
    """The parsed request-default flags, checked (ValueError naming the flag)."""
    d = RequestDefaults(temperature=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, seed=a.seed, n_predict=a.n_predict,
                        n_probs=a.n_probs)
    for flag, v, lo, hi in (("--temp", d.temperature, 0.0, 100.0), ("--top-k", d.top_k, 0, None),
                            ("--top-p", d.top_p, 0.0, 1.0), ("--min-p", d.min_p, 0.0, 1.0),
                            ("--seed", d.seed, -1, 0xFFFFFFFF), ("--n-predict", d.n_predict, -1, None),
                            ("--n-probs", d.n_probs, 0, 100)):
        if v is not None and (v < lo or (hi is not None and v > hi)):
            raise ValueError(f"{flag} ({v:g}) must be in [{lo:g}, {'inf' if hi is None else format(hi, 'g')}]")
    return d
