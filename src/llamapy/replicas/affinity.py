"""PrefixTable: which replica most likely holds a prompt's longest prefix in its KV cache.

A prompt is cut into blocks of BLOCK characters; the running hash of blocks 0..k names its
prefix of k + 1 blocks.  Each replica keeps the prefix hashes of the prompts routed to it (the
most recent MAX_ENTRIES, least recently used first out), so the replica that served the same
conversation's earlier turns, or the same system prompt, shares the most leading blocks with
a new prompt.  Characters, not tokens: the router sees request bodies, not token ids, and a
shared character prefix is a shared token prefix up to the last token or so.  No torch, no Ray."""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

BLOCK = 64  # characters per block: prefixes shorter than this are not told apart
MAX_ENTRIES = 200_000  # prefix hashes kept per replica


def prefix_hashes(text: str, block: int = BLOCK) -> list[bytes]:
    """The running hash of each whole block of text, in order: [h(b0), h(b0 b1), ...]."""
    h = hashlib.blake2b(digest_size=8)
    out = []
    for i in range(0, len(text) - block + 1, block):
        h.update(text[i : i + block].encode("utf-8", "surrogatepass"))
        out.append(h.digest())
    return out


@dataclass(slots=True)
class PrefixTable:
    """Keyed by a prompt's prefix_hashes (computed once per request, by the ingress)."""

    max_entries: int = MAX_ENTRIES
    _by_replica: dict[str, OrderedDict] = field(default_factory=dict)

    def record(self, replica: str, hashes: list[bytes]) -> None:
        """The replica now holds this prompt's prefixes (it was routed there)."""
        t = self._by_replica.setdefault(replica, OrderedDict())
        for h in hashes:
            t[h] = None
            t.move_to_end(h)
        while len(t) > self.max_entries:
            t.popitem(last=False)

    def match(self, hashes: list[bytes], replicas: list[str]) -> tuple[list[str], int]:
        """(the replicas among `replicas` sharing the longest prefix with the prompt, the
        number of whole blocks shared); ([], 0) when none shares one."""
        best: list[str] = []
        n = 0
        alive = [r for r in replicas if r in self._by_replica]
        for k, h in enumerate(hashes):
            have = [r for r in alive if h in self._by_replica[r]]
            if not have:
                break
            best, n, alive = have, k + 1, have
        return best, n

    def size(self, replica: str) -> int:
        """Prefix blocks kept for the replica: how much it was given (the smallest takes new prompts)."""
        t = self._by_replica.get(replica)
        return 0 if t is None else len(t)

    def forget(self, replica: str) -> None:
        """A replica that died lost its cache."""
        self._by_replica.pop(replica, None)


def request_text(body: dict) -> str:
    """The text a request's prompt starts with, for routing: a chat's messages (role and
    content, in order), else its prompt (a string, or a list of strings / token ids)."""
    msgs = body.get("messages")
    if isinstance(msgs, list):
        parts = []
        for m in msgs:
            if not isinstance(m, dict):
                continue
            c = m.get("content")
            if isinstance(c, list):  # content parts
                c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(f"<{m.get('role', '')}>{c if isinstance(c, str) else ''}")
        return "".join(parts)
    p = body.get("prompt")
    if isinstance(p, str):
        return p
    if isinstance(p, list):
        return "".join(x if isinstance(x, str) else f"<{x}>" for x in p)
    return ""
