"""A chat template's capabilities, found as llama.cpp's jinja::caps_get finds them
(common/jinja/caps.cpp): render probe conversations and see which inputs the template read.

llama.cpp's interpreter counts reads of each value; here the probe's dicts are TrackDicts that
record which keys were read (item access, .get, .items(), iteration, tojson).  The probes and
what each concludes, as llama.cpp:
  - typed content: a user message whose content is an empty list of parts; rendered and
    iterated or indexed, by a template that tests `is string` -> supports_typed_content (string content is assumed supported);
  - system role: a [system, user] conversation; the system message's content not read ->
    supports_system_role false (llama-server then merges it into the next message);
  - tools: a tool call with object arguments {"arg": "value"}; tools[0].function.name read ->
    supports_tools; messages[1].tool_calls read -> supports_tool_calls; arguments' "arg" read ->
    supports_object_arguments (else the probe is retried with string arguments);
  - parallel tool calls: two calls; the second call read -> supports_parallel_tool_calls.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import jinja2


class TrackDict(dict):  # type: ignore[type-arg]
    """A dict that records which of its keys a template read."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.read: set[str] = set()

    def __getitem__(self, k: Any) -> Any:
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k: Any, default: Any = None) -> Any:
        if k in self:
            self.read.add(k)
        return super().get(k, default)

    def items(self) -> Any:
        self.read.update(self.keys())
        return super().items()

    def values(self) -> Any:
        self.read.update(self.keys())
        return super().values()

    def __iter__(self) -> Any:
        self.read.update(super().keys())
        return super().__iter__()


class TrackList(list):  # type: ignore[type-arg]
    """A list that records whether a template iterated or indexed it."""

    read = False

    def __iter__(self) -> Any:
        self.read = True
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        self.read = True
        return super().__getitem__(i)


def track(x: Any) -> Any:
    """x with every dict turned into a TrackDict (lists copied)."""
    if isinstance(x, dict):
        return TrackDict({k: track(v) for k, v in x.items()})
    if isinstance(x, list) and not isinstance(x, TrackList):
        return [track(v) for v in x]
    return x


def mark_read(x: Any) -> None:
    """What tojson does to its argument: every key at every depth counts as read."""
    if isinstance(x, TrackDict):
        x.read.update(dict.keys(x))
    if isinstance(x, dict):
        for v in dict.values(x):
            mark_read(v)
    elif isinstance(x, list):
        for v in x:
            mark_read(v)


@dataclass(frozen=True, slots=True)
class TemplateCaps:
    """llama-server's /props chat_template_caps."""

    supports_object_arguments: bool = False
    supports_parallel_tool_calls: bool = False
    supports_preserve_reasoning: bool = False
    supports_reasoning_effort: bool = False
    supports_string_content: bool = True
    supports_system_role: bool = True
    supports_tool_calls: bool = True
    supports_tools: bool = True
    supports_typed_content: bool = False

    def to_json(self) -> dict[str, bool]:
        return asdict(self)


_TOOL = {"name": "tool", "type": "function", "function": {
    "name": "tool1", "description": "Tool description",
    "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
                   "required": ["arg"]}}}


def _call(cid: str, name: str, args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _tool_conv(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "User message"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "The tool response was 'tool response'"},
            {"role": "user", "content": "User message"}]


def probe_caps(template: jinja2.Template, checks_string: bool = True,
               extra: dict[str, Any] | None = None) -> TemplateCaps:
    """The template's capabilities (see the module doc); checks_string: the template tests
    whether content is a string (llama.cpp probes typed content only then)."""
    def run(messages: list[dict[str, Any]], tools: list[Any] | None = None,
            **ctx: Any) -> tuple[bool, list[Any], list[Any], str]:
        msgs, tls = track(messages), track(tools or [])
        try:
            out = template.render(messages=msgs, tools=tls, bos_token="", eos_token="", add_generation_prompt=True,
                                  **(extra or {}), **ctx)
            return True, msgs, tls, out
        except Exception:  # a probe the template rejects tells what it read before failing
            return False, msgs, tls, ""

    c: dict[str, bool] = {}
    parts = TrackList()
    ok, _, _, _ = run([{"role": "user", "content": parts}])
    c["supports_typed_content"] = ok and parts.read and checks_string
    ok, msgs, _, out = run([{"role": "system", "content": "System message"}, {"role": "user", "content": "User message"}])
    c["supports_system_role"] = "content" in msgs[0].read
    ok, msgs, tls, _ = run(_tool_conv([_call("call00001", "tool1", {"arg": "value"})]), [_TOOL])
    obj = False
    if ok:
        c["supports_tools"] = "name" in tls[0]["function"].read
        c["supports_tool_calls"] = "tool_calls" in msgs[1].read
        obj = c["supports_tool_calls"] and "arg" in dict.__getitem__(msgs[1], "tool_calls")[0]["function"]["arguments"].read
    if not obj:
        ok, msgs, tls, _ = run(_tool_conv([_call("call00001", "tool1", '{"arg": "value"}')]), [_TOOL])
        if not ok:
            c["supports_tools"] = c["supports_tool_calls"] = False
        else:
            c["supports_tools"] = "name" in tls[0]["function"].read
            c["supports_tool_calls"] = "tool_calls" in msgs[1].read
    c["supports_object_arguments"] = obj
    args: Any = {"arg": "value"} if obj else '{"arg": "value"}'
    ok, msgs, _, _ = run(_tool_conv([_call("call00001", "tool1", args), _call("call00002", "tool1", args)]), [_TOOL])
    calls = dict.__getitem__(msgs[1], "tool_calls")
    c["supports_parallel_tool_calls"] = ok and c.get("supports_tool_calls", True) and "function" in calls[1].read
    if not c.get("supports_tool_calls", True):
        c["supports_parallel_tool_calls"] = False
    _, _, _, low = run([{"role": "user", "content": "User message"}], enable_thinking=True,
                       reasoning_effort="low", reasoning_strength="low")
    _, _, _, high = run([{"role": "user", "content": "User message"}], enable_thinking=True,
                        reasoning_effort="high", reasoning_strength="high")
    c["supports_reasoning_effort"] = low != high
    rmark = "<REASONING_CONTENT_PLACEHOLDER>"
    conv = [{"role": "user", "content": "User message"},
            {"role": "assistant", "content": "Assistant message", "reasoning_content": rmark},
            {"role": "user", "content": "User message"},
            {"role": "assistant", "content": "Assistant message", "reasoning_content": "Reasoning content"},
            {"role": "user", "content": "User message"}]
    _, _, _, pres = run(conv, enable_thinking=True, preserve_thinking=True, clear_thinking=False, truncate_history_thinking=False,
                        drop_thinking=False, preserve_reasoning=True)
    c["supports_preserve_reasoning"] = rmark in pres
    return TemplateCaps(**c)
