"""Split a shell command template into words, keeping Jinja2 tags whole.

A command template is rendered word by word (see `render.render_shell`): each word that
holds a placeholder loses its shell quotes, is rendered, and is quoted again as ONE word,
so `'{{ v }}'`, `"{{ v }}"` and `{{ v }}` are equally inert whatever `v` holds. Words
without a placeholder, the blanks between words and the shell's operators (`|`, `;`,
`&&`, `>`, ...) are kept exactly as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_TAG_END = {"{{": "}}", "{%": "%}", "{#": "#}"}
_OPERATORS = frozenset("|&;<>()")
_DOUBLE_ESCAPES = frozenset('$`"\\\n')


class ShellSyntaxError(ValueError):
    """An unterminated quote or Jinja2 tag in a command template."""


@dataclass
class Word:
    """One shell word: `source` as written, `template` without its shell quoting."""

    source: str = ""
    template: str = ""
    has_tag: bool = False


@dataclass
class _Scanner:
    text: str
    pieces: list[str | Word] = field(default_factory=list)
    word: Word | None = None
    quote: str = ""
    i: int = 0

    def current(self) -> Word:
        if self.word is None:
            self.word = Word()
        return self.word

    def end_word(self) -> None:
        if self.word is not None:
            self.pieces.append(self.word)
            self.word = None

    def emit(self, source: str, literal: str) -> None:
        word = self.current()
        word.source += source
        word.template += literal

    def tag(self) -> bool:
        opener = self.text[self.i : self.i + 2]
        if opener not in _TAG_END:
            return False
        end = self.text.find(_TAG_END[opener], self.i + 2)
        if end < 0:
            raise ShellSyntaxError(f"unterminated {opener} at character {self.i + 1}")
        tag = self.text[self.i : end + 2]
        self.emit(tag, tag)
        self.current().has_tag = True
        self.i = end + 2
        return True

    def step(self) -> None:
        if self.tag():
            return
        char = self.text[self.i]
        self.i += 1
        if self.quote == "'":
            self._in_single(char)
        elif self.quote == '"':
            self._in_double(char)
        else:
            self._bare(char)

    def _in_single(self, char: str) -> None:
        if char == "'":
            self.quote = ""
            self.emit(char, "")
        else:
            self.emit(char, char)

    def _in_double(self, char: str) -> None:
        if char == '"':
            self.quote = ""
            self.emit(char, "")
        elif char == "\\" and self.text[self.i : self.i + 1] in _DOUBLE_ESCAPES:
            escaped = self.text[self.i]
            self.i += 1
            self.emit(char + escaped, "" if escaped == "\n" else escaped)
        else:
            self.emit(char, char)

    def _bare(self, char: str) -> None:
        if char.isspace() or char in _OPERATORS:
            self.end_word()
            self.pieces.append(char)
        elif char in "'\"":
            self.quote = char
            self.emit(char, "")
        elif char == "\\" and self.i < len(self.text):
            escaped = self.text[self.i]
            self.i += 1
            self.emit(char + escaped, "" if escaped == "\n" else escaped)
        else:
            self.emit(char, char)


def split_words(text: str) -> list[str | Word]:
    """The template as pieces: Words, and plain strings (blanks, operators) kept as is."""
    scanner = _Scanner(text)
    while scanner.i < len(text):
        scanner.step()
    if scanner.quote:
        raise ShellSyntaxError(f"unterminated {scanner.quote} quote")
    scanner.end_word()
    return scanner.pieces
