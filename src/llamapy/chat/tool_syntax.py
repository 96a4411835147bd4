"""Tool-call syntaxes of the model families, chosen from the chat template as llama-server
chose them (common/chat.cpp's format detection before the autoparser; the markers are the
ones its parsers look for), each with the grammar that holds a call to it and the parser that
reads calls back (tests/test-chat.cpp's cases in llama.cpp show the outputs):

  gpt-oss      <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}<|call|>
  deepseek-r1  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{args}\\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
  mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "9 alnum"}, ...]   (Nemo)
  magistral    [TOOL_CALLS]NAME[ARGS]{args}   (Mistral Small 3.2, Devstral: [ARGS] in the template)
  hermes       <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>   (Hermes 2/3, Qwen 2.5/3, QwQ, SmolLM3)
  llama3       {"name": ..., "parameters": {...}}  or  <|python_tag|>{...}   (Llama 3.1/3.2/3.3)
  generic      none of these: chat/tools.py's JSON object, tools in the system prompt
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True, slots=True)
class ChatFormat:
    kind: str  # gpt-oss | deepseek-r1 | mistral | magistral | hermes | llama3 | generic
    name: str  # llama.cpp's name for it (common_chat_format_name)

    @property
    def native(self) -> bool:
        """The template renders tools and calls itself (not the generic system-prompt form)."""
        return self.kind != "generic"

    @property
    def triggers(self) -> tuple[str, ...]:
        """Where a call starts in the output (the lazy grammar's triggers)."""
        return {"gpt-oss": (" to=functions.", "<|channel|>commentary to="), "deepseek-r1": (DS_CALLS_BEGIN, DS_CALL_BEGIN),
                "mistral": ("[TOOL_CALLS]",), "magistral": ("[TOOL_CALLS]",), "hermes": ("<tool_call>",),
                "llama3": ('{"name"', '{"type": "function"', PYTHON_TAG), "generic": ("{",)}[self.kind]


def chat_format(t: Any) -> ChatFormat:
    """The format of a ChatTemplate (or its source text)."""
    src = t if isinstance(t, str) else t.source
    if "<|channel|>" in src:
        return ChatFormat("gpt-oss", "GPT-OSS")
    if DS_CALLS_BEGIN in src or "tool▁calls▁begin" in src:
        return ChatFormat("deepseek-r1", "DeepSeek R1")
    if "[TOOL_CALLS]" in src:
        return ChatFormat("magistral", "Magistral") if "[ARGS]" in src else ChatFormat("mistral", "Mistral Nemo")
    if "<tool_call>" in src:
        return ChatFormat("hermes", "Hermes 2 Pro")
    if "<|start_header_id|>" in src and "ipython" in src:
        return ChatFormat("llama3", "Llama 3.x")
    return ChatFormat("generic", "Generic")


# ---- the grammar (llguidance Lark) ------------------------------------------------------
def _lit(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def call_lark(kind: str, fns: list[Any], choice: str, parallel: bool, closed: Any) -> str:
    """Lark for one call (or several with parallel) in `kind`'s syntax, each call's arguments
    held to its function's schema (closed: grammar.compiler.closed_objects); with choice
    "auto" the answer may instead be text that does not start like a call."""
    rules, alts = [], []
    for i, f in enumerate(fns):
        args = json.dumps(closed(f.parameters), separators=(",", ":"))
        rules.append(f"a{i}: %json {args}")
        n = f.name
        if kind == "gpt-oss":
            body = f'{_lit("<|channel|>commentary to=functions." + n + " <|constrain|>json<|message|>")} a{i} {_lit("<|call|>")}'
        elif kind == "deepseek-r1":
            body = f'{_lit(DS_CALL_BEGIN + "function" + DS_SEP + n + chr(10) + "```json" + chr(10))} a{i} {_lit(chr(10) + "```" + DS_CALL_END)}'
        elif kind == "magistral":
            body = f'{_lit(n + "[ARGS]")} a{i}'
        elif kind == "mistral":
            body = f'{_lit("{" + chr(34) + "name" + chr(34) + ": " + json.dumps(n) + ", " + chr(34) + "arguments" + chr(34) + ": ")} a{i} {_lit(", " + chr(34) + "id" + chr(34) + ": " + chr(34))} ID {_lit(chr(34) + "}")}'
        elif kind == "llama3":
            body = f'{_lit("{" + chr(34) + "name" + chr(34) + ": " + json.dumps(n) + ", " + chr(34) + "parameters" + chr(34) + ": ")} a{i} "}}"'
        else:  # hermes
            body = f'{_lit("<tool_call>" + chr(10) + "{" + chr(34) + "name" + chr(34) + ": " + json.dumps(n) + ", " + chr(34) + "arguments" + chr(34) + ": ")} a{i} {_lit("}" + chr(10) + "</tool_call>")}'
        rules.append(f"c{i}: {body}")
        alts.append(f"c{i}")
    rules.append("call: " + " | ".join(alts))
    many = {"mistral": 'call (", " call)*', "deepseek-r1": "call call*", "magistral": 'call ("[TOOL_CALLS]" call)*',
            "gpt-oss": 'call', "hermes": 'call ("\\n" call)*', "llama3": "call"}[kind] if parallel else "call"
    wrap = {"mistral": f'"[TOOL_CALLS][" {many} "]"', "deepseek-r1": f'{_lit(DS_CALLS_BEGIN)} {many} {_lit(DS_CALLS_END)}',
            "magistral": f'"[TOOL_CALLS]" {many}'}.get(kind, many)
    rules.append(f"calls: {wrap}")
    rules.append('ID: /[A-Za-z0-9]{9}/')
    first = {"hermes": "<", "gpt-oss": "<", "deepseek-r1": "<", "mistral": "[", "magistral": "[", "llama3": "{<"}[kind]
    head = "start: calls\n" if choice != "auto" else (
        f"start: TEXT | calls\nTEXT: /[^{re.escape(first)}\\s][\\s\\S]*/\n")
    return head + "\n".join(rules) + "\n"


# ---- parsing ----------------------------------------------------------------------------
def _call(name: str, args: Any, cid: str = "") -> dict[str, Any]:
    return {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False), "id": cid}


def _json_at(text: str, i: int) -> tuple[Any, int] | None:
    """The JSON value starting at text[i] (after spaces) and where it ends, or None."""
    dec = json.JSONDecoder()
    j = i
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    try:
        return dec.raw_decode(text, j)
    except json.JSONDecodeError:
        return None


def _hermes(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    k = text.find("<tool_call>")
    if k < 0:
        return None
    calls, i = [], k
    while True:
        i = text.find("<tool_call>", i)
        if i < 0:
            break
        got = _json_at(text, i + len("<tool_call>"))
        if got is None or not isinstance(got[0], dict) or "name" not in got[0]:
            return None
        end = text.find("</tool_call>", got[1])
        if end < 0 or text[got[1]:end].strip():
            return None
        calls.append(_call(got[0]["name"], got[0].get("arguments", {}), got[0].get("id", "")))
        i = end + len("</tool_call>")
    return text[:k], calls


def _llama3(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    k = text.find(PYTHON_TAG)
    if k >= 0:
        got = _json_at(text, k + len(PYTHON_TAG))
        if got and isinstance(got[0], dict) and "name" in got[0]:
            return text[:k], [_call(got[0]["name"], got[0].get("parameters", got[0].get("arguments", {})))]
        code = text[k + len(PYTHON_TAG):]
        m = re.fullmatch(r"\s*(\w+)\.call\((.*)\)\s*", code, re.S)
        if m:
            args = dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*")', m.group(2)))
            return text[:k], [_call(m.group(1), {a: json.loads(v) for a, v in args.items()})]
        return text[:k], [_call("python", {"code": code})]
    m = re.search(r'\{\s*"(?:type|name)"', text)
    if m is None:
        return None
    got = _json_at(text, m.start())
    if not got or not isinstance(got[0], dict) or "name" not in got[0] or text[got[1]:].strip(" \n;"):
        return None
    obj = got[0]
    args = obj.get("parameters", obj.get("arguments"))
    if args is None:
        return None
    return text[:m.start()], [_call(obj["name"], args)]


def _mistral(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    k = text.find("[TOOL_CALLS]")
    if k < 0:
        return None
    got = _json_at(text, k + len("[TOOL_CALLS]"))
    if not got or not isinstance(got[0], list) or not all(isinstance(c, dict) and "name" in c for c in got[0]):
        return None
    return text[:k], [_call(c["name"], c.get("arguments", {}), str(c.get("id", ""))) for c in got[0]]


def _magistral(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    k = text.find("[TOOL_CALLS]")
    if k < 0:
        return None
    calls, i = [], k
    while text.startswith("[TOOL_CALLS]", i):
        m = re.compile(r"\[TOOL_CALLS\]([^\[\s]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?\[ARGS\]").match(text, i)
        got = _json_at(text, m.end()) if m else None
        if not m or not got or not isinstance(got[0], dict):
            return None
        calls.append(_call(m.group(1), got[0], m.group(2) or ""))
        i = got[1]
        while i < len(text) and text[i] in " \n":
            i += 1
    if text[i:].strip():
        return None
    return text[:k], calls


def _deepseek(text: str) -> tuple[str, list[dict[str, Any]]] | None:
    k = text.find(DS_CALLS_BEGIN)
    if k < 0:
        return None
    pat = re.compile(re.escape(DS_CALL_BEGIN) + r"function" + re.escape(DS_SEP) + r"([^\n]+)\n```json\n(.*?)\s*```" + re.escape(DS_CALL_END), re.S)
    calls = []
    for m in pat.finditer(text, k):
        try:
            calls.append(_call(m.group(1).strip(), json.loads(m.group(2))))
        except json.JSONDecodeError:
            return None
    return (text[:k], calls) if calls else None


PARSERS = {"hermes": _hermes, "llama3": _llama3, "mistral": _mistral, "magistral": _magistral,
           "deepseek-r1": _deepseek}  # gpt-oss: chat/harmony.py


def parse_calls(text: str, kind: str, parallel: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """(content before the calls, calls as {"name", "arguments" (a JSON string), "id"}); a
    call that does not parse leaves the whole text as content and no calls, and so do
    several calls without parallel (llama-server's parser then ends after the first call
    and the output does not match the format)."""
    fn = PARSERS.get(kind)
    got = fn(text) if fn else None
    if got is None or (not parallel and len(got[1]) > 1):
        return text, []
    return got
