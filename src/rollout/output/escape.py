"""Text from hosts (and any value) made safe for the place it is shown: one rule for every
renderer. A control character (C0, DEL, C1), a line or paragraph separator, or a
bidirectional override never reaches a terminal or a report as itself: it is shown as its
escape (`\\x1b`, `\\n`, `\\u202e`), so a host cannot forge a line for another host, set the
window title, clear the screen or reorder what is read. The console escapes rich markup
(`[...]`) too; HTML escapes its own characters; JSON is escaped by its encoder already."""

from __future__ import annotations

import html
import re
from typing import Any

_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"  # a lone surrogate (from JSON's \\ud800): no UTF-8 text can hold it
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def control_escaped(value: Any, keep: str = "") -> str:
    """`value` as text, each unsafe character shown as its escape; those in `keep` (a
    multi-line report keeps "\\n" and "\\t") stay as they are."""
    text = str(value)
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _shown(m.group()), text)


def console_text(value: Any) -> str:
    """For one console line (rich): control characters escaped, newlines included, and rich
    markup escaped, so `[bold]` from a host is text."""
    # for start-up time: rich loads with the console, not with every command's error path
    from rich.markup import escape as markup_escape

    return markup_escape(control_escaped(value))


def report_text(value: Any) -> str:
    """For a multi-line text report (JUnit, Markdown, diagnose): lines and tabs kept, every
    other control character escaped."""
    return control_escaped(value, keep="\n\t")


def metric_label(value: Any) -> str:
    """For a Prometheus label value: every control character escaped but the newline, which
    the text format escapes itself with the backslash and the double quote
    (prometheus_client's generate_latest), so none reaches the file raw."""
    return control_escaped(value, keep="\n")


def html_text(value: Any, quote: bool = True) -> str:
    """For HTML: control characters escaped, then HTML's own characters."""
    return html.escape(report_text(value), quote=quote)
