"""griffe extension for the API reference: a docstring's bare doctest (`>>>` lines and their output, with no
"Examples:" heading) is shown as a fenced Python block, not read as Markdown (where `>>>` is a quote and a printed
list a link reference)."""

from __future__ import annotations

import griffe


def fence_doctests(text: str) -> str:
    out: list[str] = []
    inside = False
    for line in text.split("\n"):
        starts = line.lstrip().startswith(">>>")
        if starts and not inside:
            out.append("```python")
            inside = True
        elif inside and not line.strip():
            out.append("```")
            inside = False
        out.append(line)
    if inside:
        out.append("```")
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
