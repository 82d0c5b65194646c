"""Moodle XML and QTI 2.1 exports: every bank parses, passes the structural checks, and
round-trips every question, option, key, fraction, tolerance and feedback."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from batchlab.quiz import load_all
from batchlab.quiz.export import (
    FIXED_INSTANCE_NOTE,
    MOODLE_FRACTIONS,
    QTI_NS,
    check_moodle,
    check_qti,
    moodle_xml,
    parse_moodle,
    parse_qti,
    qti_package,
    question_record,
)

BANKS = load_all()


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def _check_shared_fields(q, got: dict, want: dict) -> None:
    """What every export must carry back unchanged: kind, texts, and a numeric key with its tolerance."""
    for key in ("kind", "stem", "explanation", "erratum"):
        assert got[key] == want[key], (q.id, key)
    if q.kind == "numeric":
        assert _same(got["answer"], want["answer"]) and _same(got["tolerance"], want["tolerance"])


@pytest.mark.parametrize("name", list(BANKS))
def test_moodle_round_trip(name: str) -> None:
    bank = BANKS[name]
    xml = moodle_xml(bank)
    assert check_moodle(xml) == len(bank)
    back = parse_moodle(xml)
    assert [r["id"] for r in back] == bank.ids
    for q, got in zip(bank, back):
        want = question_record(q)
        _check_shared_fields(q, got, want)
        if q.kind == "numeric":
            assert got["right_feedback"] == want["right_feedback"]
            assert got["wrong_feedback"] == want["wrong_feedback"]
            continue
        assert got["shuffle"] == q.shuffled
        assert [o["text"] for o in got["options"]] == [o["text"] for o in want["options"]]
        assert [o["correct"] for o in got["options"]] == [o["correct"] for o in want["options"]]
        assert [o["feedback"] for o in got["options"]] == [o["feedback"] for o in want["options"]]
        for g, w in zip(got["options"], want["options"]):
            assert abs(g["fraction"] - w["fraction"]) < 1e-6
        if q.kind == "multi":
            assert abs(sum(o["fraction"] for o in got["options"] if o["fraction"] > 0) - 1) < 1e-6
            assert abs(sum(o["fraction"] for o in got["options"] if o["fraction"] < 0) + 1) < 1e-6


@pytest.mark.parametrize("name", list(BANKS))
def test_qti_round_trip(name: str) -> None:
    bank = BANKS[name]
    data = qti_package(bank)
    assert check_qti(data) == len(bank)
    back = parse_qti(data)
    assert [r["id"] for r in back] == bank.ids
    for q, got in zip(bank, back):
        want = question_record(q)
        _check_shared_fields(q, got, want)
        if q.kind == "numeric":
            assert got["tolerance_mode"] == "absolute"
            assert got["right_feedback"] == want["right_feedback"]
            continue
        assert got["shuffle"] == q.shuffled
        assert [(o["id"], o["text"], o["correct"], o["feedback"]) for o in got["options"]] == \
               [(o["id"], o["text"], o["correct"], o["feedback"]) for o in want["options"]]
        if q.kind == "multi":
            for g, w in zip(got["options"], want["options"]):
                assert abs(g["fraction"] - w["fraction"]) < 1e-6


def test_keys_and_tolerances_match_the_bank() -> None:
    for bank in BANKS.values():
        for q in bank:
            rec = question_record(q)
            if q.kind == "numeric":
                assert _same(rec["answer"], q.expected(None))
                assert _same(rec["tolerance"], q.tolerance(q.expected(None)))
                assert rec["stem"].endswith(FIXED_INSTANCE_NOTE) == q.seeded
            else:
                assert [o["id"] for o in rec["options"] if o["correct"]] == q.key_ids


def test_moodle_fractions_are_on_moodles_grade_list() -> None:
    allowed = {round(s * f, 5) for f in MOODLE_FRACTIONS for s in (1, -1)}
    for bank in BANKS.values():
        for a in ET.fromstring(moodle_xml(bank)).iter("answer"):
            assert round(float(a.get("fraction")), 5) in allowed


def test_markup_in_text_survives_both_formats() -> None:
    bank = BANKS["ch10"]
    assert "v2/models/<m>/stats" in bank["ch10-6"].explanation
    assert parse_moodle(moodle_xml(bank))[5]["explanation"] == bank["ch10-6"].explanation
    assert parse_qti(qti_package(bank))[5]["explanation"] == bank["ch10-6"].explanation
    item = zipfile.ZipFile(io.BytesIO(qti_package(bank))).read("items/ch10-6.xml").decode()
    assert "&lt;m&gt;" in item and f'xmlns="{QTI_NS}"' in item


def _edit_zip(data: bytes, name: str, edit) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n in src.namelist():
            if n == name and edit is None:
                continue
            body = src.read(n)
            z.writestr(n, edit(body.decode()).encode() if n == name else body)
    return out.getvalue()


def test_structural_checks_catch_planted_errors() -> None:
    xml = moodle_xml(BANKS["ch02"])
    with pytest.raises(ValueError, match="not one of Moodle's grades"):
        check_moodle(xml.replace('fraction="100"', 'fraction="97"', 1))
    with pytest.raises(ValueError, match="exactly one 100 % answer"):
        check_moodle(re.sub(r'(<single>true</single>.*?)fraction="100"', r'\1fraction="0"', xml,
                            count=1, flags=re.S))
    data = qti_package(BANKS["ch02"])
    with pytest.raises(ValueError, match="correctResponse names an unknown choice"):
        check_qti(_edit_zip(data, "items/ch02-4.xml",
                            lambda t: t.replace("<value>toplevel</value>", "<value>nowhere</value>")))
    with pytest.raises(ValueError, match="missing 'items/ch02-5.xml'"):
        check_qti(_edit_zip(data, "items/ch02-5.xml", None))
    with pytest.raises(ValueError, match="out of order"):
        def swap(t: str) -> str:
            rp = re.search(r"\s*<responseProcessing>.*?</responseProcessing>", t, re.S).group()
            t = t.replace(rp, "")
            return t.replace("<itemBody>", rp.strip() + "<itemBody>", 1)
        check_qti(_edit_zip(data, "items/ch02-4.xml", swap))
    with pytest.raises(ValueError, match="undeclared outcome"):
        check_qti(_edit_zip(data, "items/ch02-4.xml",
                            lambda t: t.replace('setOutcomeValue identifier="SCORE"',
                                                'setOutcomeValue identifier="POINTS"', 1)))


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
