"""The fix for a YAML syntax error, by the parser's own problem text.

PyYAML (and libyaml) name what they found, not what to write; the common slips of a
hand-edited file each get theirs, the rest a general one.
"""

from __future__ import annotations

# (words of the problem, the fix), the first that matches
_HINTS = (
    ("mapping values are not allowed", "quote a value that holds ': ' (a: \"b: c\")"),
    ("could not find expected ':'", "give the key its ': ', or quote the text"),
    ("expected ',' or ']'", "close the [ with ], its items separated by ','"),
    ("expected ',' or '}'", "close the { with }, its entries separated by ','"),
    ("unexpected end of stream", "close the quote or bracket it opened"),
    ("found '<stream end>'", "close the bracket it opened, or give its value"),
    ("found undefined alias", "define the &anchor above the *alias that names it"),
    ("cannot start any token", "quote the value (@ and ` cannot start one unquoted)"),
    ("did not find expected key", "indent the key as the other keys of its mapping"),
    ("did not find expected '-' indicator", "indent the '-' as the other items of its list"),
    ("for merging", "merge a mapping or a list of them: <<: *a or <<: [*a, *b]"),
    ("after << must name a mapping", "each alias in the list names a mapping"),
)
GENERAL = "check the indentation and quotes there"


def syntax_hint(problem: str) -> str:
    """The fix for the parser's ``problem`` (its words, one line)."""
    return next((fix for words, fix in _HINTS if words in problem), GENERAL)
