"""Sphinx configuration: the user guide, the API reference and the performance page.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` after
``pip install -e ".[docs,torch,dask]"``: warnings are errors, the guide's code cells and the
notebooks run during the build.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import tritnum

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))  # the plotting script beside this file

project = "tritnum"
author = "the tritnum developers"
copyright = "2026, the tritnum developers"
version = release = tritnum.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_nb",
    "sphinx_design",
]

# -- the notebooks: rendered with their outputs, executed once, here (not under nbmake) ----
NOTEBOOKS = DOCS / "notebooks"
if NOTEBOOKS.is_dir():
    shutil.rmtree(NOTEBOOKS)
NOTEBOOKS.mkdir()
for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
    shutil.copy2(notebook, NOTEBOOKS / notebook.name)

nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 600
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_templates", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints",
                    "jupyter_execute"]

# -- API reference ------------------------------------------------------------------------
templates_path = ["_templates"]
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# an undocumented or misspelt parameter, or a docstring numpydoc cannot parse, fails the build
numpydoc_validation_checks = {"PR01", "PR02", "PR03", "PR10", "GL08"}
# no source to validate: collections.abc's mixin methods (a frozen module) and the
# strategies that hypothesis's @composite rebuilds with exec
numpydoc_validation_exclude = {r"\.__[a-z_]+__$", r"^tritnum\.typing\.",
                               r"\.GGUFModel\.(get|keys|items|values)$",
                               r"^tritnum\.testing\.(packed_trits|ternary_tensors)$"}

# broken references to tritnum's own names are errors; other projects' names have no
# inventory offline (the CI machine reaches only package registries)
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|torch|dask|da|distributed|collections|typing|hypothesis|os|pathlib|"
               r"numba|sklearn|cupy|concurrent|io|enum|gguf|safetensors)(\..*)?"),
    (r"py:.*", r"(array_like|array-like|optional|default|callable|int|float|bool|str|bytes|"
               r"tuple|list|dict|None|object|slice|type|Path|PathLike|Mapping|Sequence|"
               r"Iterable|Callable|Any|ndarray|Generator|SeedSequence|Literal)"),
]

# -- HTML -----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"tritnum {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
}
html_sidebars = {"index": []}


def _skip_foreign_members(app, what, name, obj, skip, options):
    """Document a class's own members, not those it inherits from dict, Mapping or nn.Module."""
    owner = getattr(obj, "fget", obj)
    module = getattr(owner, "__module__", None) or ""
    if (callable(owner) or isinstance(obj, property)) and not module.startswith("tritnum"):
        return True
    return None


def setup(app):
    """Sphinx's hook: connect the member filter."""
    app.connect("autodoc-skip-member", _skip_foreign_members)
