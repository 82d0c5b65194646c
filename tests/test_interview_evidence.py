"""batchlab.course.interview: every interview question tied to a chapter and an experiment."""

from __future__ import annotations

import json
import re

import pytest

from batchlab.course import interview as IE
from batchlab.paths import repo_root
from batchlab.quiz import load_bank

NOTEBOOKS = repo_root() / "notebooks"


def test_every_bank_question_has_evidence():
    assert list(IE.EVIDENCE) == load_bank("interview").ids


def _headings(nb_path) -> set[str]:
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    out = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                m = re.match(r"^#{1,6}\s+(.*)$", line)
                if m:
                    out.add(m.group(1).strip())
    return out


def test_links_point_at_existing_notebooks_and_headings():
    for ev in IE.EVIDENCE.values():
        for nb, heading in ev.links:
            path = NOTEBOOKS / nb
            assert path.is_file(), nb
            if heading:
                assert heading in _headings(path), (nb, heading)


def test_link_markdown_anchor():
    assert IE.link_markdown("09_misconceptions.ipynb", "误区三：a b") == "[09 · 误区三：a b](09_misconceptions.ipynb#误区三：a-b)"
    assert IE.link_markdown("04_tuning.ipynb") == "[04](04_tuning.ipynb)"


@pytest.mark.parametrize("qid", list(IE.EVIDENCE))
def test_each_experiment_returns_its_number(qid):
    text = IE.run(qid)
    assert re.search(r"\d", text), text


def test_run_rejects_unknown_ids():
    with pytest.raises(ValueError, match="unknown question"):
        IE.run("Q11")


def test_answer_card_has_explanation_erratum_and_links():
    bank = load_bank("interview")
    card = IE.answer_card("Q5", run_experiment=False)
    assert bank["Q5"].explanation in card
    assert "> **勘误**" in card and "06_engineering.ipynb#" in card
    assert "> **勘误**" not in IE.answer_card("Q1", run_experiment=False)
    rows = IE.evidence_rows(run_experiments=False)
    assert [r["题号"] for r in rows] == bank.ids and all("](" in r["在哪一章"] for r in rows)
