"""The file tools of --tools: read_file, file_glob_search, grep_search, write_file, with
llama-server's names, params, defaults, limits and texts (tools/server/server-tools.cpp).
Relative paths resolve against the x-tool-cwd header (params["cwd"]), else the server's working
directory.  A problem the model can fix is a 200 `{"error": TEXT}`, as llama-server's.
grep_search's pattern is a Python `re` (llama-server: std::regex ECMAScript), searched per line."""
from __future__ import annotations

import base64
import os
import re
import stat

from .tools_base import Json, Params, ServerTool, function_def, json_value, prop, required_str, resolve
from .tools_glob import KINDS, list_entries, path_glob_match

SERVER_TOOL_READ_FILE_MAX_SIZE = 16 * 1024  # bytes of text read_file returns (and of a file read whole)
SERVER_TOOL_READ_FILE_MAX_SIZE_BASE64 = 32 * 1024 * 1024  # bytes, x-resp-type: base64
SERVER_TOOL_FILE_SEARCH_MAX_RESULTS = 100
SERVER_TOOL_GREP_SEARCH_MAX_RESULTS = 100
REGEX_SPECIALS = "\\^$.|?*+()[]{}"


def _lines(data: bytes) -> list[bytes]:
    """std::getline's lines: split at '\\n', no empty last line after a final newline."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def read_file(params: Params, _sink=None) -> Json:
    path = required_str(params, "path")
    start_line = json_value(params, "start_line", 1)
    end_line = json_value(params, "end_line", -1)  # -1: to the end
    append_loc = json_value(params, "append_loc", False)
    as_base64 = json_value(params, "resp_type", "") == "base64"  # the x-resp-type header, not the model
    full = resolve(path, params.get("cwd", ""))
    try:
        st = os.stat(full)
    except OSError:
        return {"error": f"cannot stat file: {path}"}
    if not stat.S_ISREG(st.st_mode):  # std::filesystem::file_size of a directory is an error
        return {"error": f"cannot stat file: {path}"}
    size = st.st_size
    if as_base64 and size > SERVER_TOOL_READ_FILE_MAX_SIZE_BASE64:
        return {"error": f"file too large ({size} bytes, max {SERVER_TOOL_READ_FILE_MAX_SIZE_BASE64})"}
    if not as_base64 and size > SERVER_TOOL_READ_FILE_MAX_SIZE and end_line == -1:
        return {"error": f"file too large ({size} bytes, max {SERVER_TOOL_READ_FILE_MAX_SIZE}). "
                         "Use start_line/end_line to read a portion."}
    try:
        with open(full, "rb") as f:
            content = f.read()
    except OSError:
        return {"error": f"failed to open file: {path}"}
    if as_base64:
        return {"base64": base64.b64encode(content).decode("ascii"), "size_bytes": len(content)}
    out = bytearray()
    for lineno, line in enumerate(_lines(content), start=1):
        if lineno < start_line:
            continue
        if end_line != -1 and lineno > end_line:
            break
        piece = (f"{lineno}\u2192".encode() if append_loc else b"") + line + b"\n"
        if len(out) + len(piece) > SERVER_TOOL_READ_FILE_MAX_SIZE:
            out += b"[output truncated]"
            break
        out += piece
    return {"plain_text_response": _text(bytes(out))}


def file_glob_search(params: Params, _sink=None) -> Json:
    path = required_str(params, "path")
    base = resolve(path, params.get("cwd", ""))
    include = json_value(params, "include", "**")
    exclude = json_value(params, "exclude", "")
    kind = json_value(params, "type", "file")
    max_depth = max(0, json_value(params, "max_depth", 0))
    limit = json_value(params, "limit", SERVER_TOOL_FILE_SEARCH_MAX_RESULTS)
    if limit < 1:
        return {"error": f"invalid limit: {limit} (expected 1 or more)"}
    limit = min(limit, SERVER_TOOL_FILE_SEARCH_MAX_RESULTS)
    if kind not in KINDS:
        return {"error": f'invalid type: {kind} (expected "file", "dir" or "all")'}
    listing = list_entries(base, max_depth, kind)
    if listing.err:
        return {"error": f"{listing.err}: {path}"}
    matches = [e for e in listing.entries
               if path_glob_match(include, e.rel) and not (exclude and path_glob_match(exclude, e.rel))]
    shown = matches[:limit]
    text = "".join(e.rel + ("/" if e.is_dir else "") + "\n" for e in shown)
    text += f"\n---\nTotal matches: {len(matches)}\n"
    if len(matches) > len(shown):
        text += (f"[{len(shown)} results limit reached ({len(matches)} total matches). "
                 "Refine the glob pattern to narrow the search.]\n")
    if listing.truncated:
        text += "[results truncated: time budget or unreadable directory]\n"
    entries = [{"path": e.rel, "type": "dir" if e.is_dir else "file"} for e in shown]
    return {"plain_text_response": text, "entries": entries, "base": base}


def grep_search(params: Params, _sink=None) -> Json:
    path = required_str(params, "path")
    pattern = required_str(params, "pattern")
    include = json_value(params, "include", "**")
    exclude = json_value(params, "exclude", "")
    show_lineno = json_value(params, "return_line_numbers", False)
    literal = json_value(params, "literal", False)
    ignore_case = json_value(params, "ignore_case", False)
    ctx_lines = max(0, json_value(params, "context_lines", 0))
    if literal:
        pattern = "".join("\\" + c if c in REGEX_SPECIALS else c for c in pattern)
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        return {"error": f"invalid regex: {e}"}
    full = resolve(path, params.get("cwd", ""))
    files: list[tuple[str, str]] = []  # (absolute path, path shown)
    if os.path.isfile(full):
        files.append((full, path))
    elif os.path.isdir(full):
        listing = list_entries(full, 0, "file")
        if listing.err:
            return {"error": f"{listing.err}: {path}"}
        files += [(os.path.join(full, e.rel), e.rel) for e in listing.entries
                  if path_glob_match(include, e.rel) and not (exclude and path_glob_match(exclude, e.rel))]
    else:
        return {"error": f"path does not exist: {path}"}
    out: list[str] = []
    total, limit_reached = 0, False
    show_num = show_lineno or ctx_lines > 0
    for fpath, shown in files:
        if limit_reached:
            break
        try:
            with open(fpath, "rb") as f:
                lines = [_text(ln) for ln in _lines(f.read())]
        except OSError:
            continue
        for i, line in enumerate(lines):
            if total >= SERVER_TOOL_GREP_SEARCH_MAX_RESULTS:
                limit_reached = True
                break
            if not rx.search(line):
                continue
            lo, hi = (max(0, i - ctx_lines), min(len(lines) - 1, i + ctx_lines)) if ctx_lines > 0 else (i, i)
            for j in range(lo, hi + 1):
                sep = ":" if j == i else "-"
                out.append(shown + sep + (f"{j + 1}{sep}" if show_num else "") + lines[j] + "\n")
            if ctx_lines > 0:
                out.append("--\n")
            total += 1
    text = "".join(out) + f"\n---\nTotal matches: {total}\n"
    if limit_reached:
        text += f"[{SERVER_TOOL_GREP_SEARCH_MAX_RESULTS} matches limit reached. Narrow the path/pattern/include to see more.]\n"
    return {"plain_text_response": text}


def write_text(full: str, data: bytes) -> bool:
    """Write `data` to `full`, its parent directories made first."""
    try:
        os.makedirs(os.path.dirname(full) or "/", exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    except OSError:
        return False
    return True


def write_file(params: Params, _sink=None) -> Json:
    path = required_str(params, "path")
    data = required_str(params, "content").encode()
    if not write_text(resolve(path, params.get("cwd", "")), data):
        return {"error": f"failed to write file: {path}"}
    return {"result": "file written successfully", "path": path, "bytes": len(data)}


GLOB_DESC = ("Recursively search for files matching a glob pattern under a directory. "
             "Automatically skips files ignored by .gitignore (when the directory is inside a git repo) "
             "and common junk directories (.git, node_modules, build, dist, etc.) otherwise. "
             "A pattern with no '/' (e.g. \"*.cpp\") matches the file's basename at any depth. "
             "A pattern containing '/' matches the full relative path; unless already anchored with "
             "\"**/\" or a leading '/', it is automatically prefixed with \"**/\". "
             "Use type=\"dir\" or \"all\" to also list directories; directory entries are suffixed with '/' in the output. "
             "Note: directory listings do not apply .gitignore filtering.")
GREP_DESC = ("Search for a pattern in files under a path. Returns matching lines with file paths "
             "(and, unless searching a single file, paths relative to the given directory). "
             "Automatically skips files ignored by .gitignore (when the directory is inside a git repo) "
             "and common junk directories (.git, node_modules, build, dist, etc.) otherwise. "
             "include/exclude: a pattern with no '/' matches the basename at any depth; a pattern "
             "containing '/' matches the full relative path (auto-anchored with \"**/\" unless already anchored).")
N = SERVER_TOOL_FILE_SEARCH_MAX_RESULTS


def fs_tools() -> list[ServerTool]:
    return [
        ServerTool("read_file", "Read file", function_def(
            "read_file", "Read the contents of a file. Optionally specify a 1-based line range. "
                         "If append_loc is true, each line is prefixed with its line number (e.g. \"1\u2192...\").",
            {"path": prop("string", "Path to the file"),
             "start_line": prop("integer", "First line to read, 1-based (default: 1)"),
             "end_line": prop("integer", "Last line to read, 1-based inclusive (default: end of file)"),
             "append_loc": prop("boolean", "Prefix each line with its line number")}, ["path"]), read_file),
        ServerTool("file_glob_search", "File search", function_def("file_glob_search", GLOB_DESC, {
            "path": prop("string", "Base directory to search in"),
            "include": prop("string", "Glob pattern for files to include (e.g. \"*.cpp\" or \"src/**/*.cpp\"). Default: **"),
            "exclude": prop("string", "Glob pattern for files to exclude"),
            "type": prop("string", "Entry type to return: \"file\" (default), \"dir\" or \"all\""),
            "max_depth": prop("integer", "Maximum depth to descend into subdirectories (default: 0 = unlimited; 1 = direct children only)"),
            "limit": prop("integer", f"Maximum number of results to return, capped at {N} (default {N})")}, ["path"]),
            file_glob_search),
        ServerTool("grep_search", "Grep search", function_def("grep_search", GREP_DESC, {
            "path": prop("string", "File or directory to search in"),
            "pattern": prop("string", "Pattern to search for (regular expression unless literal is true)"),
            "include": prop("string", "Glob pattern to filter files (default: **)"),
            "exclude": prop("string", "Glob pattern to exclude files"),
            "return_line_numbers": prop("boolean", "If true, include line numbers in results"),
            "literal": prop("boolean", "Treat pattern as a literal string instead of a regular expression (default: false)"),
            "ignore_case": prop("boolean", "Case-insensitive search (default: false)"),
            "context_lines": prop("integer", "Number of lines of context to show before and after each match (default: 0)")},
            ["path", "pattern"]), grep_search),
        ServerTool("write_file", "Write file", function_def(
            "write_file", "Write content to a file, creating it (including parent directories) if it does not exist. "
                          "May use with edit_file for more complex edits.",
            {"path": prop("string", "Path of the file to write"), "content": prop("string", "Content to write")},
            ["path", "content"]), write_file, permission_write=True),
    ]
