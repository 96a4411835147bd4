"""edit_file of --tools: exact text replacements, several per call, each edits[].old_text unique
in the file and matched against the original content (llama-server's server_tool_edit_file).

An old_text not found as is may still match after both sides are normalized per line (trailing
spaces/tabs/CR dropped; smart quotes, dashes, the minus sign and special spaces made ASCII):
then the lines an edit touches are rewritten from the normalized text and every other line
stays byte for byte.  Uniqueness is always checked on the normalized text.  The file is read
and written as bytes (undecodable bytes kept via surrogateescape)."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from .tools_base import Json, Params, ServerTool, at, function_def, prop, required_str, resolve
from .tools_fs import write_text

# look-alikes made ASCII: smart quotes, dashes, the minus sign, special spaces
FUZZY_TABLE = MappingProxyType(str.maketrans({
    **{c: "'" for c in "\u2018\u2019\u201a\u201b"}, **{c: '"' for c in "\u201c\u201d\u201e\u201f"},
    **{chr(c): "-" for c in range(0x2010, 0x2016)}, "\u2212": "-", "\u00a0": " ",
    **{chr(c): " " for c in range(0x2002, 0x200B)}, "\u202f": " ", "\u205f": " ", "\u3000": " "}))


@dataclass
class MatchedEdit:
    edit_index: int
    match_index: int  # offset into the base content (normalized when any edit needed it)
    match_length: int
    new_text: str


def normalize(content: str) -> str:
    """Each line's trailing ' ', '\\t', '\\r' dropped and its look-alike characters made ASCII;
    the line count and positions are kept."""
    return "\n".join(line.rstrip(" \t\r").translate(FUZZY_TABLE) for line in content.split("\n"))


def count_occurrences(content: str, needle: str) -> int:
    return content.count(needle) if needle else 0  # non-overlapping, as llama-server's


def apply_replacements(content: str, reps: list[MatchedEdit], offset: int) -> str:
    for r in reversed(reps):
        i = r.match_index - offset
        content = content[:i] + r.new_text + content[i + r.match_length:]
    return content


def _split_nl(content: str) -> list[str]:
    parts = content.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    return out + ([parts[-1]] if parts[-1] else [])


def _spans(content: str) -> list[tuple[int, int]]:
    spans, off = [], 0
    for line in _split_nl(content):
        spans.append((off, off + len(line)))
        off += len(line)
    return spans


def _line_range(spans: list[tuple[int, int]], index: int, length: int) -> tuple[int, int]:
    """The lines [start, end) a replacement touches; (0, 0) when it lies past them."""
    start = next((i for i, (a, b) in enumerate(spans) if a <= index < b), -1)
    if start < 0:
        return 0, 0
    end = start
    while end < len(spans) and spans[end][1] < index + length:
        end += 1
    return (0, 0) if end >= len(spans) else (start, end + 1)


def apply_preserving_unchanged_lines(original: str, base: str, reps: list[MatchedEdit]) -> str:
    original_lines, spans = _split_nl(original), _spans(base)
    groups: list[list] = []  # [start_line, end_line, reps]
    for r in reps:
        start, end = _line_range(spans, r.match_index, r.match_length)
        if groups and start < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end)
            groups[-1][2].append(r)
        else:
            groups.append([start, end, [r]])
    out, line = [], 0
    for start, end, grp in groups:
        out += original_lines[line:start]
        a, b = spans[start][0], spans[end - 1][1]
        out.append(apply_replacements(base[a:b], grp, a))
        line = end
    out += original_lines[line:]
    return "".join(out)


def edit_file(params: Params, _sink=None) -> Json:
    path = required_str(params, "path")
    edits_json = at(params, "edits")
    if not isinstance(edits_json, list) or not edits_json:
        return {"error": '"edits" must be a non-empty array'}
    edits: list[tuple[str, str]] = []
    for e in edits_json:
        old, new = required_str(e, "old_text"), required_str(e, "new_text")
        if not old:
            return {"error": f"edits[{len(edits)}].old_text must not be empty"}
        edits.append((old, new))
    full = resolve(path, params.get("cwd", ""))
    try:
        with open(full, "rb") as f:
            original = f.read().decode("utf-8", errors="surrogateescape")
    except OSError:
        return {"error": f"failed to open file: {path}"}
    any_fuzzy = False
    for i, (old, _) in enumerate(edits):
        if old in original:
            continue
        if normalize(old) not in normalize(original):
            return {"error": f"could not find edits[{i}].old_text in {path}, it must match the file's current content exactly"}
        any_fuzzy = True
    base = normalize(original) if any_fuzzy else original
    matched: list[MatchedEdit] = []
    for i, (old, new) in enumerate(edits):
        needle = normalize(old) if any_fuzzy else old
        n = count_occurrences(normalize(original), normalize(old))
        if n > 1:
            return {"error": f"found {n} occurrences of edits[{i}].old_text in {path}, it must be unique"}
        matched.append(MatchedEdit(i, base.find(needle), len(needle), new))
    matched.sort(key=lambda m: m.match_index)
    for a, b in zip(matched, matched[1:]):
        if a.match_index + a.match_length > b.match_index:
            return {"error": f"edits[{a.edit_index}] and edits[{b.edit_index}] overlap in {path}; "
                             "merge them into one edit or target disjoint regions"}
    new_content = apply_preserving_unchanged_lines(original, base, matched) if any_fuzzy else \
        apply_replacements(base, matched, 0)
    if new_content == original:
        return {"error": "no changes made: the replacement(s) produced identical content"}
    if not write_text(full, new_content.encode("utf-8", errors="surrogateescape")):
        return {"error": f"failed to write file: {path}"}
    return {"result": "file edited successfully", "path": path, "edits_applied": len(matched)}


EDIT_DESC = ("Edit a file using exact text replacement. Each edits[].old_text must be unique in the file "
             "and is matched against the original content, not incrementally. Merge nearby changes into "
             "one edit instead of overlapping edits. Use write_file to replace the whole file.")


def edit_tool() -> ServerTool:
    item = {"type": "object", "properties": {
        "old_text": prop("string", "Exact text to find; must be unique in the file and must not overlap with other edits"),
        "new_text": prop("string", "Text to replace old_text with")}, "required": ["old_text", "new_text"]}
    edits = {"type": "array", "description": "One or more exact text replacements to apply", "items": item}
    return ServerTool("edit_file", "Edit file", function_def(
        "edit_file", EDIT_DESC, {"path": prop("string", "Path to the file to edit"), "edits": edits}, ["path", "edits"]),
        edit_file, permission_write=True)
