"""Strings that break naive quoting: shared by the connector's unit and end-to-end tests."""

TRICKY = [
    "it's",
    'say "hi"',
    "$HOME and `date` and $(id)",
    "back\\slash \\n",
    "two\nlines",
    "naïve ünïcödé ✓",
    "  spaces  ",
    "-n",
]
