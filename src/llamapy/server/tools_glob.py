"""Globs and directory listings for file_glob_search and grep_search, as llama-server's
(common/common.cpp glob_match; tools/server/server-tools.cpp path_glob_match, list_entries).

glob: `*` any run of non-'/' characters, `**` anything including '/', `?` one non-'/'
character, `[...]` a class (`!` negates, `a-z` ranges, a leading `]` or `-` literal).  A
pattern with no '/' matches the basename at any depth; one with '/' the relative path,
prefixed with `**/` unless it starts with `**/` or `/` (or is `**`).

Listing: files come from `git -C BASE ls-files --cached --others --exclude-standard` when that
works (so .gitignore applies); otherwise, and for directories, a walk that lists the junk
directories (SERVER_TOOL_JUNK_DIR_NAMES) but never descends into them nor into links, in
readdir order, depth-first from the last directory seen, within 15 s
(SERVER_TOOL_LIST_ENTRIES_TIMEOUT; past it, or on an unreadable directory, `truncated`)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .tools_proc import run_subprocess

SERVER_TOOL_GIT_LS_FILES_MAX_OUTPUT = 8 * 1024 * 1024  # bytes
SERVER_TOOL_LIST_ENTRIES_TIMEOUT = 15  # seconds, one listing call
SERVER_TOOL_JUNK_DIR_NAMES = frozenset({".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv",
                                        "dist", "build", "target", ".cache", ".idea", ".vscode"})
KINDS = ("file", "dir", "all")  # what a listing returns: files, directories, both


@dataclass(frozen=True)
class ListEntry:
    rel: str  # '/'-separated, relative to the listed base
    is_dir: bool = False


@dataclass
class Listing:
    entries: list[ListEntry] = field(default_factory=list)
    err: str = ""  # set when the base is not a directory
    truncated: bool = False  # the walk could not see everything


def _class_match(c: str, cls: str) -> bool:
    negated = cls.startswith("!")
    if negated:
        cls = cls[1:]
    if cls[:1] in ("]", "-"):
        if cls[0] == c:
            return not negated
        cls = cls[1:]
    i, matched = 0, False
    while i < len(cls):
        if i + 2 < len(cls) and cls[i + 1] == "-" and cls[i + 2] != "]":
            if cls[i] <= c <= cls[i + 2]:
                matched = True
                break
            i += 3
        else:
            if cls[i] == c:
                matched = True
                break
            i += 1
    return matched != negated


def glob_match(pattern: str, s: str) -> bool:
    """common.cpp's glob_match, over positions (p in the pattern, i in the string), memoized
    per call so that `**` runs stay polynomial."""
    memo: dict[tuple[int, int], bool] = {}

    def m(p: int, i: int) -> bool:
        if (p, i) not in memo:
            memo[(p, i)] = step(p, i)
        return memo[(p, i)]

    def step(p: int, i: int) -> bool:
        if p == len(pattern):
            return i == len(s)
        c = pattern[p]
        if pattern.startswith("**", p):
            return any(m(p + 2, k) for k in range(i, len(s) + 1))
        if c == "*":
            k = i
            while k < len(s) and s[k] != "/":
                if m(p + 1, k):
                    return True
                k += 1
            return m(p + 1, k)
        if c == "?" and i < len(s) and s[i] != "/":
            return m(p + 1, i + 1)
        if c == "[":
            end = p + 1
            if pattern[end:end + 1] in ("]", "-"):
                end += 1
            while end < len(pattern) and pattern[end] != "]":
                end += 1
            if end < len(pattern):
                return i < len(s) and _class_match(s[i], pattern[p + 1:end]) and m(end + 1, i + 1)
            return i < len(s) and s[i] == "[" and m(p + 1, i + 1)
        return i < len(s) and c == s[i] and m(p + 1, i + 1)

    return m(0, 0)


def path_glob_match(pattern: str, rel: str) -> bool:
    """No '/' in the pattern: the basename at any depth; else the whole relative path."""
    if "/" not in pattern:
        return glob_match(pattern, rel.rsplit("/", 1)[-1])
    if pattern == "**" or pattern.startswith("**/") or pattern.startswith("/"):
        return glob_match(pattern, rel)
    return glob_match("**/" + pattern, rel)


def _depth(rel: str) -> int:
    return 1 + rel.count("/")


def _git_files(base: str, max_depth: int) -> list[ListEntry] | None:
    res = run_subprocess(["git", "-C", base, "ls-files", "--cached", "--others", "--exclude-standard"],
                         SERVER_TOOL_GIT_LS_FILES_MAX_OUTPUT, SERVER_TOOL_LIST_ENTRIES_TIMEOUT)
    if res.exit_code != 0 or res.timed_out:
        return None
    out = []
    for line in res.output.split("\n"):
        line = line.removesuffix("\r").replace("\\", "/")
        if not line or (max_depth > 0 and _depth(line) > max_depth):
            continue
        if os.path.isfile(os.path.join(base, line)):
            out.append(ListEntry(line))
    return out


def _walk(base: str, max_depth: int, kind: str, deadline: float, listing: Listing) -> None:
    stack: list[tuple[str, str, int]] = [(base, "", 0)]
    while stack:
        if time.monotonic() >= deadline:
            listing.truncated = True
            return
        path, rel_dir, depth = stack.pop()
        try:
            it = os.scandir(path)
        except PermissionError:
            continue  # skip_permission_denied
        except OSError:
            listing.truncated = True
            continue
        with it:
            for entry in it:
                if time.monotonic() >= deadline:
                    listing.truncated = True
                    return
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    continue
                if is_dir:
                    if kind != "file":
                        listing.entries.append(ListEntry(rel, True))
                    if entry.name in SERVER_TOOL_JUNK_DIR_NAMES or entry.is_symlink():
                        continue
                    if max_depth == 0 or depth + 1 < max_depth:
                        stack.append((entry.path, rel, depth + 1))
                elif kind != "dir" and entry.is_file():
                    listing.entries.append(ListEntry(rel))


def list_entries(base: str, max_depth: int, kind: str) -> Listing:
    """Entries under `base` (absolute): max_depth 0 unlimited, 1 its children only."""
    if not os.path.isdir(base):
        return Listing(err="path does not exist or is not a directory")
    deadline = time.monotonic() + SERVER_TOOL_LIST_ENTRIES_TIMEOUT
    if kind == "file":
        files = _git_files(base, max_depth)
        if files is not None:
            return Listing(files)
    listing = Listing()
    _walk(base, max_depth, kind, deadline, listing)
    return listing
