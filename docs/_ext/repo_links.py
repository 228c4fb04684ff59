"""Links from the documentation to files of the repository outside ``docs/``.

The pages link to the evidence where it lies, e.g. ``[refit.md](../benchmarks/results/refit.md)``:
a relative link, which works wherever the repository is read as files (a code host, an editor).
Those files are not pages of the site, so Sphinx cannot link to them; before a page (or a file
it includes) is parsed, each such link becomes its text followed by the file's path in the
repository, as code: ``refit.md (`benchmarks/results/refit.md`)``. A link to a file that does
not exist is a build warning (an error under ``-W``), so a moved record breaks the build rather
than the page.

Links to pages of the site, to anchors and to URLs, images, and anything inside code are left
as they are.
"""
from __future__ import annotations

import re
from pathlib import Path

from sphinx.util import logging

__all__ = ["rewrite", "setup"]

logger = logging.getLogger(__name__)

# [text](target) not preceded by "!" (an image); the target without spaces or a title.
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]+)\]\((?P<target>[^)\s]+)\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def rewrite(text: str, folder: Path, root: Path, docs: Path, where: str) -> str:
    """``text`` (Markdown read from ``folder``) with its links to repository files outside
    ``docs`` replaced by their text and the file's path; inside code fences nothing changes."""
    parts = re.split(r"(^(?:```|~~~).*?^(?:```|~~~)[^\n]*$)", text, flags=re.MULTILINE | re.DOTALL)
    out = []
    for k, part in enumerate(parts):
        if k % 2:  # a fenced block
            out.append(part)
            continue
        # a link that starts inside an inline code span is code too
        spans = [(m.start(), m.end()) for m in re.finditer(r"(`+)[^`]*?\1", part)]

        def replace(m, spans=spans):
            if any(start < m.start() < end for start, end in spans):
                return m[0]
            return _replace(m, folder, root, docs, where)

        out.append(_LINK.sub(replace, part))
    return "".join(out)


def _replace(match: re.Match, folder: Path, root: Path, docs: Path, where: str) -> str:
    text, target = match["text"], match["target"]
    if target.startswith("#") or _SCHEME.match(target):
        return match[0]
    path = (folder / target.split("#", 1)[0]).resolve()
    if path.is_relative_to(docs) or not path.is_relative_to(root):
        return match[0]
    shown = path.relative_to(root).as_posix() + ("/" if path.is_dir() else "")
    if not path.exists():
        logger.warning("%s: link to %s, which is not in the repository", where, shown)
    plain = text.strip("`")
    if plain in (shown, shown.rstrip("/")):
        return f"`{shown}`"
    return f"{text} (`{shown}`)"


def _on_source_read(app, docname, source):
    path = Path(app.env.doc2path(docname))
    source[0] = rewrite(source[0], path.parent, _root(app), _docs(app), str(path))


def _on_include_read(app, relative_path, parent_docname, content):
    path = (_docs(app) / relative_path).resolve()
    content[0] = rewrite(content[0], path.parent, _root(app), _docs(app), str(path))


def _docs(app) -> Path:
    return Path(app.srcdir).resolve()


def _root(app) -> Path:
    return _docs(app).parent


def setup(app):
    app.connect("source-read", _on_source_read)
    app.connect("include-read", _on_include_read)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
