"""Placeholders that a nested interpreter would read again: advice at load.

Safety does not rest on this list: a value from outside the playbook never reaches a shell
string at all (`shell_rule`). What the list still does: name, as a warning, a playbook's
own value in a word that another interpreter parses again (`sh -c '...'`, `bash -c`,
`python3 -c`, `perl -e`, `eval`, here-documents, backticks, `$(...)`, `ssh host CMD`, ...),
where an outside value would be refused; and refuse an outside value in such an item of an
argv list (`["sh", "-c", "echo {{ v }}"]`), where the item is a script. The spelling to
use: the value in an environment variable (`env:`), used as `"$NAME"`, or an argv item
after the script (`["sh", "-c", "... \"$1\"", "_", "{{ v }}"]`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .render import is_template
from .shellwords import Word, split_words

_SEPARATORS = frozenset("|&;()\n")
SHELLS = re.compile(r"^(?:sh|bash|dash|zsh|ksh|mksh|ash|fish|busybox)$")
"""Shells: the word after a flag cluster holding `c` (`-c`, `-ec`, `-lc`) is a script."""
SCRIPT_FLAGS: dict[re.Pattern[str], frozenset[str]] = {
    SHELLS: frozenset("c"),
    re.compile(r"^(?:python|pypy)[0-9.]*$"): frozenset("c"),
    re.compile(r"^(?:perl|ruby)[0-9.]*$"): frozenset("eE"),
    re.compile(r"^(?:node|nodejs|php|lua[0-9.]*)$"): frozenset("erp"),
    re.compile(r"^(?:su|runuser|flock|script)$"): frozenset("c"),
    re.compile(r"^(?:sed|gsed)$"): frozenset("e"),
    re.compile(r"^env$"): frozenset("S"),
}
"""Interpreters whose script follows a flag (the flag may also hold it: `-c'...'`)."""
FIRST_OPERAND = re.compile(r"^(?:awk|gawk|mawk|nawk|sed|gsed)$")
"""Interpreters whose first operand is their program (`awk '{print}'`)."""
REST_IS_CODE = re.compile(r"^(?:eval|ssh|watch|source|\.)$")
"""Words after which every word is read again (eval, ssh's remote command, watch)."""

SAFE_SPELLING = (
    "pass the value as an environment variable: env: {V: '{{ v }}'} next to the command, "
    'and use "$V" inside the script, or write the command as an argv list and give the '
    "value after the script: [sh, -c, 'echo \"$1\"', _, '{{ v }}']"
)


@dataclass(frozen=True)
class Nested:
    """A placeholder that a nested interpreter would parse again."""

    word: str
    reader: str

    def message(self) -> str:
        return (
            f"the placeholder in {self.word!r} is read again by {self.reader}: a value "
            f"there would run as code. Instead, {SAFE_SPELLING}"
        )

    def advice(self) -> str:
        return (
            f"the placeholder in {self.word!r} is read again by {self.reader}: fine for the "
            "playbook's own value, refused once a value from outside (--set, the inventory) "
            f"takes its place. Safer: {SAFE_SPELLING}"
        )


def _name(word: Word) -> str:
    """The program a word names (`/usr/bin/python3` -> `python3`), '' when templated."""
    return "" if word.has_tag else word.template.rsplit("/", 1)[-1]


def _script_flag(word: Word, letters: frozenset[str]) -> bool:
    text = word.template
    return text.startswith("-") and not text.startswith("--") and bool(letters & set(text[1:]))


def simple_commands(pieces: Sequence[str | Word]) -> Iterator[list[Word]]:
    """The words of each simple command (split at | & ; ( ) and newlines)."""
    words: list[Word] = []
    for piece in pieces:
        if isinstance(piece, Word):
            words.append(piece)
        elif piece in _SEPARATORS:
            yield words
            words = []
    yield words


def _in_interpreter(words: list[Word]) -> Nested | None:
    """A templated word that an interpreter named in these words reads as code."""
    for index, word in enumerate(words):
        name = _name(word)
        if not name:
            continue
        rest = words[index + 1 :]
        if REST_IS_CODE.match(name):
            hit = next((w for w in rest if w.has_tag), None)
            if hit is not None:
                return Nested(hit.source, f"{name} (it parses its arguments as a command)")
        for pattern, letters in SCRIPT_FLAGS.items():
            if pattern.match(name):
                found = _after_flag(rest, letters, name)
                if found is not None:
                    return found
        if FIRST_OPERAND.match(name):
            operand = next((w for w in rest if not w.template.startswith("-")), None)
            if operand is not None and operand.has_tag:
                return Nested(operand.source, f"{name} (its first operand is its program)")
    return None


def _after_flag(rest: list[Word], letters: frozenset[str], name: str) -> Nested | None:
    for index, word in enumerate(rest):
        if word.has_tag and word.template.startswith("-"):
            return Nested(word.source, f"{name} (a flag of it may hold its script)")
        if _script_flag(word, letters):
            script = rest[index + 1] if index + 1 < len(rest) else None
            if script is not None and script.has_tag:
                return Nested(script.source, f"{name} {word.template} (its script)")
            return None
    return None


def _substitutions(pieces: Sequence[str | Word]) -> Nested | None:
    """A placeholder inside `$(...)`, backticks, or after a here-document's `<<`."""
    depth: list[bool] = []  # one entry per open parenthesis: whether it opened `$(`
    backtick = heredoc = False
    previous: str | Word | None = None
    for index, piece in enumerate(pieces):
        if isinstance(piece, Word):
            inner = "`" in piece.source or "$(" in piece.source
            if piece.has_tag and (inner or backtick or heredoc or any(depth)):
                reader = "a here-document" if heredoc else "a command substitution: $(...) or `...`"
                return Nested(piece.source, f"the shell again ({reader})")
            if piece.source.count("`") % 2:
                backtick = not backtick
        elif piece == "(":
            depth.append(isinstance(previous, Word) and previous.source.endswith("$"))
        elif piece == ")" and depth:
            depth.pop()
        elif piece == "<" and previous != "<":
            heredoc = heredoc or _run_of(pieces, index, "<") == 2
        previous = piece
    return None


def _run_of(pieces: Sequence[str | Word], start: int, char: str) -> int:
    """How many `char` pieces follow one another from `start` (`<<` is 2, `<<<` is 3)."""
    end = start
    while end < len(pieces) and pieces[end] == char:
        end += 1
    return end - start


def nested_placeholder(command: str | Sequence[str]) -> Nested | None:
    """The first placeholder a nested interpreter would read again, or None.

    A string is a shell command (split into words as `render_shell` does); a list is an
    argv (no shell: only interpreters named in it read their script again)."""
    if isinstance(command, str):
        pieces = split_words(command)
        found = _substitutions(pieces)
        if found is not None:
            return found
    else:
        pieces = [Word(w, w, is_template(w)) for w in command]
    for words in simple_commands(pieces):
        found = _in_interpreter(words)
        if found is not None:
            return found
    return None
