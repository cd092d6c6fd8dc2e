"""The compiled jinja2 templates, kept between runs (issue 14).

Every run renders the boot units and the training unit; compiling their four templates costs
about 40 ms of the controller's CPU, loading them compiled about 7 ms. jinja2 keeps each one
under ``~/.cache/pvegpu/jinja/<options>/`` (``$XDG_CACHE_HOME`` when set): jinja2 checks each
entry against its template's source and the Python version, and ``<options>`` is a digest of
jinja2's version and the Environment's options that shape the compiled code, its finalize
function's code included (jinja2's own key holds none of them), so an edited template, a changed
option or finalize compiles again. A cache that cannot
be read or written is skipped: the template is compiled as without it.

>>> import tempfile; d = tempfile.mkdtemp()
>>> env = with_cache(jinja2.Environment(loader=jinja2.DictLoader({"t": "{{ x }}"})), d)
>>> env.get_template("t").render(x=1), len(os.listdir(d)), len(os.listdir(options_dir(env, d)))
('1', 1, 1)
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path

import jinja2

from ..digests import text_digest


class QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """jinja2's file cache, never failing a render: an unreadable or unwritable entry is
    skipped (the template is compiled, as without a cache)."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except OSError:
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "pvegpu" / "jinja"


#: The Environment's attributes that change the code jinja2 compiles a template to.
CODE_OPTIONS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
    "autoescape",
    "optimized",
    "is_async",
)


def options_dir(env: jinja2.Environment, base: str | Path | None = None) -> Path:
    """The cache directory of templates compiled with ``env``'s options."""
    finalize = env.finalize
    key = [jinja2.__version__, *(repr(getattr(env, o, None)) for o in CODE_OPTIONS)]
    key += [repr(sorted(env.extensions)), repr(finalize is not None)]
    key += [repr(getattr(finalize, "jinja_pass_arg", None))]
    # jinja2 applies finalize to constant output at compile time: its code is part of the key
    code = getattr(finalize, "__code__", None)
    key += [marshal.dumps(code).hex() if code is not None else ""]
    return (Path(base) if base is not None else default_dir()) / text_digest("\0".join(key))[:16]


def with_cache(env: jinja2.Environment, base: str | Path | None = None) -> jinja2.Environment:
    """``env`` keeping its compiled templates in :func:`options_dir` (unchanged when that
    directory cannot be made)."""
    path = options_dir(env, base)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return env
    env.bytecode_cache = QuietBytecodeCache(str(path))
    return env
