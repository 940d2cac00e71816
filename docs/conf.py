"""Sphinx configuration of hacrl's documentation: the Markdown pages of docs/ (through myst-parser) and the
API reference (docs/api.md: autodoc and napoleon read the docstrings). ``bash scripts/docs.sh`` builds it
into build/docs/ with every warning an error; CI runs that after the lint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

import hacrl

project = "hacrl"
author = "hacrl contributors"
release = version = hacrl.__version__
root_doc = "index"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]

# Markdown: GitHub-style anchors for headings down to ###, so links such as results/tiny-pairs.md#6-... resolve
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

# API reference: Google-style docstrings ("Args:", "Returns:"), members in source order, signatures with
# their annotations as written; each automodule in api.md names its members (a default `members` here would
# override those lists)
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

html_theme = "alabaster"
html_title = f"hacrl {release}"
html_static_path: list[str] = []


class RepositoryLinks(SphinxPostTransform):
    """Links from a page to a file or folder of the repository outside docs/ (``../README.md``,
    ``../results/tiny-model-evidence``) point at that path in the checkout, relative to the built page, so the
    site built into build/docs/ opens them; a link to a path that does not exist is left to myst, which warns."""

    default_priority = 8  # before myst's resolver (9), which would call them missing

    def run(self, **kwargs: Any) -> None:
        src = Path(self.env.srcdir)
        repo = src.parent
        out = Path(self.app.outdir)
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            target, fragment = str(node["reftarget"]), node.get("reftargetid")
            if node.get("refdomain") == "doc":
                if target in self.env.all_docs:
                    continue
                path = (src / target).with_suffix(".md")
            else:
                target, _, fragment = target.partition("#")
                path = (src / Path(node.get("refdoc", self.env.docname)).parent / target).resolve()
            if not path.exists() or src in path.parents or repo not in path.parents:
                continue
            page_dir = out / Path(node.get("refdoc", self.env.docname)).parent
            uri = os.path.relpath(path, page_dir) + (f"#{fragment}" if fragment else "")
            ref = nodes.reference("", "", internal=False, refuri=uri)
            ref += node.children
            node.replace_self(ref)


def setup(app: Sphinx) -> None:
    app.add_post_transform(RepositoryLinks)
