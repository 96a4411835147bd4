"""Whether a chat template thinks, and its reasoning markers, found as llama.cpp's differential
analysis finds them (common/chat-diff-analyzer.cpp analyze_reasoning) when rendering a past
assistant turn's reasoning_content shows none (chat/apply.py reasoning_tags tries that first):

  - thinking enabled: one user message with the generation prompt, enable_thinking false
    against true.  What only the "true" render adds at its end is the start marker (a template
    that opens <think> itself); what only the "false" render adds at its end is the closed
    empty block (Cohere's `<|START_THINKING|><|END_THINKING|>`, Qwen3's `<think>\\n\\n</think>`):
    its end, and its start when it is a marker before a last marker.  When both renders
    differ (SmolLM3 changes its system message too), the tail of one found in the other
    followed by exactly two markers gives both;
  - reasoning scope (templates that render tool calls): a past turn with content and
    reasoning_content against one with reasoning_content and a tool call; reasoning shown only
    with the tool call (Cohere) gives the markers around it (llama.cpp's TOOLS_ONLY).

llama-server's `--reasoning auto` turns enable_thinking on for such a template
(server-context.cpp: common_chat_templates_support_enable_thinking)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

_THINK = "THINKING_PROBE_c5e1"
_USER, _ASSISTANT = "USER_PROBE_c5e1", "ASSISTANT_PROBE_c5e1"
_MARKER = re.compile(r"<[^>]*>|\[[^\]]*\]")  # llama.cpp's segmentize_markers: <...> and [...]
_ANCHOR = 64


@dataclass(frozen=True, slots=True)
class ThinkingMarkers:
    start: str = ""
    end: str = ""

    @property
    def found(self) -> bool:
        return bool(self.start or self.end)


def segments(text: str) -> list[tuple[bool, str]]:
    """(is_marker, text) pieces: markers and the text between them."""
    out: list[tuple[bool, str]] = []
    pos = 0
    for m in _MARKER.finditer(text):
        if m.start() > pos:
            out.append((False, text[pos:m.start()]))
        out.append((True, m.group()))
        pos = m.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def diff_split(a: str, b: str) -> tuple[str, str]:
    """(a's middle, b's middle) after their common leading and trailing segments."""
    sa, sb = segments(a), segments(b)
    i = 0
    while i < len(sa) and i < len(sb) and sa[i] == sb[i]:
        i += 1
    j = 0
    while j < len(sa) - i and j < len(sb) - i and sa[len(sa) - 1 - j] == sb[len(sb) - 1 - j]:
        j += 1
    return "".join(x for _, x in sa[i:len(sa) - j]), "".join(x for _, x in sb[i:len(sb) - j])


def _pruned(text: str) -> list[tuple[bool, str]]:
    return [s for s in segments(text) if s[1].strip()]


def from_thinking_switch(off: str, on: str) -> ThinkingMarkers:
    """analyze_reasoning::compare_thinking_enabled: markers from the generation prompt rendered
    with enable_thinking false (off) and true (on)."""
    left, right = diff_split(off, on)
    lt, rt = left.strip(), right.strip()
    if not lt and right:
        return ThinkingMarkers(start=right) if rt and on.endswith(rt) else ThinkingMarkers()
    if not rt and left:
        if not lt or not off.endswith(lt):
            return ThinkingMarkers()
        seg = _pruned(off)
        start = seg[-2][1] if len(seg) >= 2 and seg[-1][1] == lt and seg[-2][0] else ""
        return ThinkingMarkers(start=start, end=left)
    if lt and rt:
        for base, extended in ((on, off), (off, on)):
            anchor = base[-_ANCHOR:]
            pos = extended.rfind(anchor)
            if pos < 0 or pos + len(anchor) >= len(extended):
                continue
            extra = extended[pos + len(anchor):].strip()
            seg = _pruned(extra)
            if len(seg) == 2 and seg[0][0] and seg[1][0]:
                return ThinkingMarkers(start=seg[0][1], end=seg[1][1])
    return ThinkingMarkers()


def from_tool_call_turn(with_content: str, with_call: str) -> ThinkingMarkers | None:
    """analyze_reasoning::compare_reasoning_scope: reasoning rendered only beside a tool call;
    the markers right around it (none found: no thinking).  None when reasoning is not shown
    only there."""
    if _THINK in with_content or _THINK not in with_call:
        return None
    k = with_call.index(_THINK)
    before = _pruned(with_call[:k])
    after = _pruned(with_call[k + len(_THINK):])
    end = after[0][1] if after and after[0][0] else ""
    start = before[-1][1] if before and before[-1][0] and end else ""
    return ThinkingMarkers(start=start, end=end)


def analyze(render: Callable[[dict[str, Any]], str], tool_calls: bool) -> ThinkingMarkers:
    """The markers found by the two probes above; `render(ctx)` renders the template with ctx
    (messages, add_generation_prompt, enable_thinking, tools) and raises on failure."""
    user = {"role": "user", "content": _USER}
    try:
        found = from_thinking_switch(render({"messages": [user], "add_generation_prompt": True, "enable_thinking": False}),
                                     render({"messages": [user], "add_generation_prompt": True, "enable_thinking": True}))
    except Exception:
        found = ThinkingMarkers()
    if not tool_calls:
        return found
    tools = [{"type": "function", "function": {"name": "probe_fn", "description": "probe",
                                               "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]
    call = {"id": "call00001", "type": "function", "function": {"name": "probe_fn", "arguments": {"a": "VVVV"}}}
    try:
        scope = from_tool_call_turn(
            render({"messages": [user, {"role": "assistant", "content": _ASSISTANT, "reasoning_content": _THINK}],
                    "tools": tools, "enable_thinking": True}),
            render({"messages": [user, {"role": "assistant", "content": None, "reasoning_content": _THINK,
                                        "tool_calls": [call]}], "tools": tools, "enable_thinking": True}))
    except Exception:
        scope = None
    if scope is None:
        return found
    return ThinkingMarkers(start=scope.start or found.start, end=scope.end) if scope.end else ThinkingMarkers()
