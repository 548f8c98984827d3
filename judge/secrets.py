"""Keeping credentials out of everything written: judgments, the cache, error messages, the terminal.

Keys come only from the environment. A server may still echo one back (a 401 body that quotes the
Authorization header), so every text that leaves the asking layer passes through `Redactor`.
"""

from __future__ import annotations

import re
from typing import overload

# Shapes of credentials even when we do not know the value: bearer tokens, api_key fields, common key prefixes and
# the user:password part of a URL.
_PATTERNS = re.compile(
    r"(?i)(?P<lead>bearer\s+|api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"  # Authorization headers, api_key fields
    r"|(?P<scheme>://)[^/\s@:]+:[^/\s@]+@"  # the user:password part of a URL
    r"|\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}"  # common key prefixes
)
MASK = "[redacted]"


class Redactor:
    def __init__(self, *secrets: str | None):
        # Longest first, so a key that contains another is masked whole.
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    @overload
    def __call__(self, text: str) -> str: ...
    @overload
    def __call__(self, text: None) -> None: ...
    def __call__(self, text: str | None) -> str | None:
        if not text:
            return text
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        def masked(m: re.Match) -> str:
            return m.group("scheme") + MASK + "@" if m.group("scheme") else (m.group("lead") or "") + MASK

        return _PATTERNS.sub(masked, text)
