"""Sphinx configuration for the batchlab book (built by `python book/build.py`)."""
project = "一口锅推理批处理实验课 (batchlab)"
author = "batchlab"
language = "zh_CN"
html_search_language = "zh"          # jieba-backed Chinese full-text search
root_doc = "notebooks/index"
extensions = ["myst_nb", "sphinx-mathjax-offline"]
nb_execution_mode = "off"            # the stored outputs are the content
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
myst_dmath_allow_space = False   # `$$…$$` inside a list item must not swallow the next `$`
suppress_warnings = ["myst.header"]   # chapter 06 jumps H1 to H3 in a callout; layout only, not a broken link
exclude_patterns = ["_build"]
html_theme = "sphinx_book_theme"
html_title = "一口锅推理批处理实验课"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_theme_options = {
    "show_navbar_depth": 1,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "show_toc_level": 2,
}
html_last_updated_fmt = None
html_copy_source = False


def _mark_errata(app, doctree, docname):
    """Give 勘误 blockquotes (`> **勘误** ...`) the class `erratum` so book.css styles them as asides."""
    from docutils import nodes  # reason: only needed when Sphinx runs this hook
    for quote in doctree.findall(nodes.block_quote):
        first = quote.next_node(nodes.paragraph)
        strong = first.next_node(nodes.strong) if first is not None else None
        if (strong is not None and strong.astext().startswith("勘误")
                and first.astext().lstrip().startswith(strong.astext())):
            quote["classes"].append("erratum")


def setup(app):
    app.connect("doctree-resolved", _mark_errata)
