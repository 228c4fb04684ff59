"""Sphinx configuration of autodeuq's documentation.

Build (from the repository root; .ci/run does this after the tests, warnings as errors)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Sphinx, not MkDocs: the package's docstrings are numpy style and use Sphinx roles (:func:,
:class:, :data:, :mod:, :meth:), which only Sphinx resolves. Pages are Markdown (MyST). The build
is offline: no intersphinx inventories are fetched.
"""
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT))  # the checkout's autodeuq, installed or not

import autodeuq  # noqa: E402

project = "autodeuq"
author = "autodeuq contributors"
release = version = autodeuq.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "cli_reference",
    "repo_links",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# numpy-style docstrings (napoleon, part of Sphinx); Google style is not used in the package.
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
# "Attributes" as fields of their class: an attribute that is also a documented property (a member)
# would otherwise be described twice.
napoleon_use_ivar = True

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}

html_theme = "alabaster"
html_title = f"autodeuq {release}"
html_static_path = []
html_theme_options = {"description": "Automated deep ensembles with uncertainty quantification"}
