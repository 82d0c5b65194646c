"""Moodle XML and QTI 2.1 exports of every bank: the formats' structural rules, and each
question's stem, options, key, fractions, tolerance and feedback as the bank file states them.

No package on the registries this project uses ships the IMS QTI 2.1 or Moodle XML schema (looked
for: citolab-qti-convert, qti-package-maker, onyx2moodle, pyslet — none has an .xsd), so the
rules are checked by the small checker below (`check_moodle`, `check_qti`), not an XSD.
"""

from __future__ import annotations

import html
import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from batchlab.quiz import load_all
from batchlab.quiz.export import FIXED_INSTANCE_NOTE, moodle_xml, qti_package

BANKS = load_all()
NS = "{http://www.imsglobal.org/xsd/imsqti_v2p1}"
CP = "{http://www.imsglobal.org/xsd/imscp_v1p1}"
#: Grades Moodle's question importer accepts (question/format/xml: `moodle_fractions`).
GRADES = {round(s * f, 5) for s in (1, -1) for f in (
    100, 90, 83.33333, 80, 75, 70, 66.66667, 60, 50, 40, 33.33333, 30, 25, 20, 16.66667,
    14.28571, 12.5, 11.11111, 10, 5, 0)}
ITEM_ORDER = ["responseDeclaration", "outcomeDeclaration", "itemBody", "responseProcessing",
              "modalFeedback"]


def check_moodle(text: str) -> int:
    """Moodle XML rules our export relies on; returns the number of questions."""
    n = 0
    for q in ET.fromstring(text).findall("question"):
        if q.get("type") == "category":
            continue
        name = q.findtext("name/text")
        assert name and q.findtext("questiontext/text"), name
        fr = [float(a.get("fraction")) for a in q.findall("answer")]
        assert all(round(f, 5) in GRADES for f in fr), (name, fr)
        if q.get("type") == "numerical":
            assert 100 in fr and float(q.find("answer/tolerance").text) >= 0, name
        elif q.findtext("single") == "true":
            assert fr.count(100) == 1 and len(fr) >= 2, name
        else:
            assert q.get("type") == "multichoice" and abs(sum(f for f in fr if f > 0) - 100) < 0.01, name
        n += 1
    return n


def _qti_item(item: ET.Element, where: str) -> None:
    names = [c.tag.removeprefix(NS) for c in item]
    assert [ITEM_ORDER.index(n) for n in names] == sorted(ITEM_ORDER.index(n) for n in names), where
    declared = {d.get("identifier") for d in item if d.tag.endswith("Declaration")}
    outcomes = {d.get("identifier") for d in item.iter(NS + "outcomeDeclaration")}
    for el in item.find(NS + "responseProcessing").iter():
        if el.tag in (NS + "variable", NS + "correct", NS + "mapResponse"):
            assert el.get("identifier") in declared, where
        if el.tag == NS + "setOutcomeValue":
            assert el.get("identifier") in outcomes, where
    choices = {c.get("identifier") for c in item.iter(NS + "simpleChoice")}
    correct = {v.text for v in item.iter(NS + "correctResponse") for v in v}
    assert not choices or correct <= choices, where
    assert all(m.get("outcomeIdentifier") in outcomes for m in item.iter(NS + "modalFeedback")), where


def check_qti(data: bytes) -> int:
    """QTI 2.1 package rules: manifest files present, items well ordered and declared, the test
    naming the items; returns the number of items."""
    z = zipfile.ZipFile(io.BytesIO(data))
    names = set(z.namelist())
    items = {}
    for r in ET.fromstring(z.read("imsmanifest.xml")).iter(CP + "resource"):
        assert {r.get("href")} | {f.get("href") for f in r.iter(CP + "file")} <= names, r.get("href")
        if r.get("type") == "imsqti_item_xmlv2p1":
            item = ET.fromstring(z.read(r.get("href")))
            _qti_item(item, r.get("href"))
            items[r.get("href")] = item.get("identifier")
    tests = [n for n in names if "/" not in n and n != "imsmanifest.xml"]
    refs = [(a.get("href"), a.get("identifier"))
            for a in ET.fromstring(z.read(tests[0])).iter(NS + "assessmentItemRef")]
    assert refs == list(items.items())
    return len(items)


def _stored(name: str) -> list[dict]:
    """The bank as its file stores it (not through the loader)."""
    return json.loads((BANKS[name].path).read_text("utf-8"))


def _unhtml(text: str | None) -> str:
    return html.unescape((text or "").replace("<br>", "\n"))


@pytest.mark.parametrize("name", list(BANKS))
def test_moodle_export_carries_each_question(name: str) -> None:
    xml = moodle_xml(BANKS[name])
    assert check_moodle(xml) == len(BANKS[name])
    exported = [q for q in ET.fromstring(xml).findall("question") if q.get("type") != "category"]
    for raw, q in zip(_stored(name), exported, strict=True):
        assert q.findtext("idnumber") == raw["id"]
        general = _unhtml(q.findtext("generalfeedback/text"))
        assert general.split("\n\n勘误：")[-1] == raw.get("erratum", general)
        stem = _unhtml(q.findtext("questiontext/text"))
        answers = q.findall("answer")
        if raw["kind"] == "numeric":
            assert stem.endswith(FIXED_INSTANCE_NOTE) == ("formula" in raw)
            if "formula" not in raw:
                assert stem == raw["question"] and general.startswith(raw["explanation"])
                value, tol = raw["answer"], raw["tolerance"]
                want = tol.get("abs", abs(value) * tol.get("rel", 0))
                assert float(answers[0].findtext("text")) == pytest.approx(value)
                assert float(answers[0].findtext("tolerance")) == pytest.approx(want)
            continue
        assert stem == raw["question"] and general.startswith(raw["explanation"])
        opts = raw["answers"]
        k = sum(a["correct"] for a in opts)
        want = [100 if a["correct"] else 0 for a in opts] if raw["kind"] == "single" else \
            [100 / k if a["correct"] else -100 / (len(opts) - k) for a in opts]
        assert [_unhtml(a.findtext("text")) for a in answers] == [a["answer"] for a in opts]
        assert [float(a.get("fraction")) for a in answers] == pytest.approx(want, abs=1e-4)
        for a, el in zip(opts, answers):
            fb = _unhtml(el.findtext("feedback/text"))
            assert a.get("feedback", "") in fb and a.get("misconception", "") in fb


@pytest.mark.parametrize("name", list(BANKS))
def test_qti_export_carries_each_question(name: str) -> None:
    data = qti_package(BANKS[name])
    assert check_qti(data) == len(BANKS[name])
    z = zipfile.ZipFile(io.BytesIO(data))
    for raw in _stored(name):
        item = ET.fromstring(z.read(f"items/{raw['id']}.xml"))
        correct = [v.text for c in item.iter(NS + "correctResponse") for v in c]
        feedback = {m.get("identifier"): "".join(m.itertext()) for m in item.iter(NS + "modalFeedback")}
        assert feedback["EXPLANATION"].startswith(raw["explanation"].split("{{")[0])
        if raw["kind"] == "numeric":
            eq = next(item.iter(NS + "equal"))
            assert eq.get("toleranceMode") == "absolute"
            if "formula" not in raw:
                assert float(correct[0]) == pytest.approx(raw["answer"])
            continue
        inter = next(item.iter(NS + "choiceInteraction"))
        assert inter.findtext(NS + "prompt") == raw["question"]
        assert [(c.get("identifier"), c.text) for c in inter.iter(NS + "simpleChoice")] == \
            [(a["id"], a["answer"]) for a in raw["answers"]]
        assert correct == [a["id"] for a in raw["answers"] if a["correct"]]
        assert inter.get("maxChoices") == ("1" if raw["kind"] == "single" else "0")
        assert inter.get("shuffle") == ("false" if name == "interview" else "true")


def test_markup_in_text_is_escaped_in_both_formats() -> None:
    bank = BANKS["ch10"]
    assert "v2/models/<m>/stats" in bank["ch10-6"].explanation
    moodle = ET.fromstring(moodle_xml(bank)).findall("question")[6].findtext("generalfeedback/text")
    assert "v2/models/&lt;m&gt;/stats" in moodle    # HTML inside XML: unescaped once by the parser
    item = zipfile.ZipFile(io.BytesIO(qti_package(bank))).read("items/ch10-6.xml").decode()
    assert "&lt;m&gt;" in item and f'xmlns="{NS[1:-1]}"' in item


def test_the_checkers_catch_planted_errors() -> None:
    xml = moodle_xml(BANKS["ch02"])
    with pytest.raises(AssertionError):
        check_moodle(xml.replace('fraction="100"', 'fraction="97"', 1))
    with pytest.raises(AssertionError):
        check_moodle(re.sub(r'(<single>true</single>.*?)fraction="100"', r'\1fraction="0"', xml,
                            count=1, flags=re.S))
    raw = zipfile.ZipFile(io.BytesIO(qti_package(BANKS["ch02"]))).read("items/ch02-4.xml")
    _qti_item(ET.fromstring(raw), "as exported")
    for path, attr, value in ((f"{NS}responseDeclaration/{NS}correctResponse/{NS}value", None, "nowhere"),
                              (f"{NS}responseProcessing//{NS}setOutcomeValue", "identifier", "PTS")):
        item = ET.fromstring(raw)
        el = item.find(path)
        el.text = value if attr is None else el.text
        el.set(attr or "x", value)
        with pytest.raises(AssertionError):
            _qti_item(item, "planted")
    item = ET.fromstring(raw)
    item.insert(0, item.find(NS + "responseProcessing"))
    with pytest.raises(AssertionError):
        _qti_item(item, "out of order")


def test_export_cli(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "batchlab.quiz", "export", "--bank", "ch02",
                        "--format", "moodle"], capture_output=True, timeout=60)
    assert r.returncode == 0 and check_moodle(r.stdout.decode("utf-8")) == len(BANKS["ch02"])
    out = tmp_path / "ch02-qti.zip"
    r = subprocess.run([sys.executable, "-m", "batchlab.quiz", "export", "--bank", "ch02",
                        "--format", "qti", "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and check_qti(out.read_bytes()) == len(BANKS["ch02"])
    r = subprocess.run([sys.executable, "-m", "batchlab.quiz", "export", "--bank", "ch99",
                        "--format", "qti"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown bank 'ch99'" in r.stderr and "Traceback" not in r.stderr
