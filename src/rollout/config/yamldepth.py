"""How deeply a YAML text nests, read from the text before any parser sees it.

ruamel's scanner spends seconds on a hostile file nested a thousand levels deep (and then
recurses out of its stack), so a file is refused before parsing when its flow nesting
(`[`, `{`) plus its block nesting (indentation levels, `- - -` sequences) goes past
MAX_VALUE_DEPTH: the same bound that the values check applies after parsing. The scan is
an upper estimate of the parser's depth that a legal file's comments, quoted strings and
block scalars (`|`, `>`) do not inflate.
"""

from __future__ import annotations

import re

MAX_VALUE_DEPTH = 32
"""How deeply a YAML file, a --set value or a vars file may nest lists and mappings."""

_MAX_LEVELS = MAX_VALUE_DEPTH + 1  # depths 0 to MAX_VALUE_DEPTH
_BLOCK_SCALAR = re.compile(r"(?:^|[\s:-])[|>][-+0-9]*\s*(?:#.*)?$")
_MAPPING_ITEM = re.compile(r"[^#\[{\"']*?:(?:\s|$)")
_MAY_NEST = re.compile(r"[\[{\"']")


class _Scan:
    """The scan's state across lines: open block levels, flow depth, an open quote."""

    def __init__(self) -> None:
        self.columns: list[int] = []  # the indentation of each open block level
        self.flow = 0
        self.quote = ""
        self.scalar_parent: int | None = None  # a block scalar's parent column

    def deepest_on(self, line: str) -> int:
        """The deepest nesting this line reaches (0: a line of text, not of structure)."""
        body = line.lstrip(" ")
        column = len(line) - len(body)
        if self.scalar_parent is not None:
            if not body.strip() or column > self.scalar_parent:
                return 0
            self.scalar_parent = None
        if not body.strip() or body.startswith("#"):
            return 0
        start = 0
        if not self.flow and not self.quote:
            start = self._block(body, column)
            if _BLOCK_SCALAR.search(body):
                self.scalar_parent = column
        return self._flow(body, start)

    def _block(self, body: str, column: int) -> int:
        """Open and close block levels at `column`: the line's own, one more for each `- `
        inside the first (`- - x`), and one for a mapping that an item holds (`- k: v`)."""
        while self.columns and self.columns[-1] > column:
            self.columns.pop()
        if not self.columns or self.columns[-1] < column:
            self.columns.append(column)
        index = 0
        while body.startswith(("- ", "-\t"), index) and len(self.columns) <= _MAX_LEVELS:
            if index:
                self.columns.append(column + index)
            index += 2
            while index < len(body) and body[index] in " \t":
                index += 1
        if index and _MAPPING_ITEM.match(body, index):
            self.columns.append(column + index)
        return index

    def _flow(self, body: str, start: int) -> int:
        """Count the `[`/`{` that open a collection: where a node starts (after `: `, `- `,
        `,` or another `[`), outside quotes and comments; `a[1]` in plain text is text."""
        deepest = len(self.columns) + self.flow
        if not (self.quote or self.flow) and not _MAY_NEST.search(body, start):
            return deepest
        at_node, escaped, previous = True, False, " "
        for char in body[start:]:
            if self.quote:
                if escaped:
                    escaped = False
                elif char == "\\" and self.quote == '"':
                    escaped = True
                elif char == self.quote:
                    self.quote, at_node = "", False
            elif char == "#" and previous in " \t":
                break
            elif char in "\"'" and (at_node or (char == "'" == previous)):
                self.quote = char
            elif char in "[{" and (at_node or self.flow):
                self.flow += 1
                deepest = max(deepest, len(self.columns) + self.flow)
                if deepest > _MAX_LEVELS:
                    return deepest
            elif char in "]}" and self.flow:
                self.flow -= 1
                at_node = False
            elif char in ":,":
                at_node = True
            elif char not in " \t":
                at_node = False
            previous = char
        return deepest


def too_deep(text: str) -> int | None:
    """The 1-based line where `text` first nests deeper than MAX_VALUE_DEPTH, or None.
    Levels are counted as the values check counts them: the outermost at depth 0."""
    scan = _Scan()
    for number, line in enumerate(text.splitlines(), start=1):
        if scan.deepest_on(line) > _MAX_LEVELS:
            return number
    return None
