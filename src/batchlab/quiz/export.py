"""Export banks to Moodle XML (`moodle_xml`) and an IMS QTI 2.1 zip package (`qti_package`).

A multi-select scores each key `100/k` % and each distractor `-100/(n-k)` %, so ticking everything
earns nothing; a seeded numeric question is exported as its default instance (`FIXED_INSTANCE_NOTE`).
"""

from __future__ import annotations

import html
import io
import xml.etree.ElementTree as ET
import zipfile
from typing import Any

from batchlab.quiz.bank import Bank, Question

QTI_NS = "http://www.imsglobal.org/xsd/imsqti_v2p1"
_CP_NS = "http://www.imsglobal.org/xsd/imscp_v1p1"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_QTI_XSD = "http://www.imsglobal.org/xsd/qti/qtiv2p1/imsqti_v2p1.xsd"
_CP_XSD = "http://www.imsglobal.org/xsd/imscp_v1p1.xsd"

FIXED_INSTANCE_NOTE = "（导出为固定实例：参数取题库的默认值；在课程里每位学员的数字各不相同。）"
"""Appended to the stem of a seeded numeric question in every export."""

_MOODLE_FRACTIONS = (100, 90, 83.33333, 80, 75, 70, 66.66667, 60, 50, 40, 33.33333, 30, 25, 20,
                    16.66667, 14.28571, 12.5, 11.11111, 10, 5, 0)


def _grade(share: float) -> str:
    """A percent as Moodle writes it, snapped to its grade list (ValueError if off the list)."""
    for v in (s * f for f in _MOODLE_FRACTIONS for s in (1, -1)):
        if abs(share - v) < 1e-4:
            return f"{v:.7g}" if v != int(v) else str(int(v))
    raise ValueError(f"{share:g} % is not a grade Moodle accepts")


def _num(x: float) -> str:
    return f"{x:.10g}"


def _record(q: Question) -> dict[str, Any]:
    """What both formats export of one question (article order; fractions are shares of 1)."""
    inst = q.instance(None, article_order=True)
    rec: dict[str, Any] = {"stem": inst.stem + (FIXED_INSTANCE_NOTE if q.seeded else ""),
                           "general": inst.explanation + (f"\n\n勘误：{q.erratum}" if q.erratum else "")}
    if q.kind == "numeric":
        value = float(inst.expected)
        return {**rec, "answer": value, "tolerance": q.tolerance(value),
                "right": q.raw["answers"][0]["feedback"], "wrong": q.raw["answers"][1]["feedback"]}
    n, k = len(q.option_ids), len(q.key_ids)
    rec["options"] = [{"id": a["id"], "text": a["answer"], "correct": a["correct"], "feedback": a["feedback"],
                       "fraction": (1.0 if a["correct"] else 0.0) if q.kind == "single" else
                       (1.0 / k if a["correct"] else -1.0 / (n - k))} for a in q.raw["answers"]]
    return rec


def _html(text: str) -> str:
    return html.escape(text, quote=False).replace("\n", "<br>")


def _text_el(parent: ET.Element, tag: str, text: str) -> None:
    ET.SubElement(ET.SubElement(parent, tag, {"format": "html"}), "text").text = _html(text)


def moodle_xml(bank: Bank) -> str:
    """The bank as a Moodle XML question file (see the module docstring)."""
    quiz = ET.Element("quiz")
    cat = ET.SubElement(quiz, "question", {"type": "category"})
    ET.SubElement(ET.SubElement(cat, "category"), "text").text = f"$course$/top/batchlab/{bank.name}"
    _text_el(cat, "info", f"batchlab 题库 {bank.name}（{len(bank)} 题）")
    for q in bank:
        rec = _record(q)
        kind = "numerical" if q.kind == "numeric" else "multichoice"
        el = ET.SubElement(quiz, "question", {"type": kind})
        ET.SubElement(ET.SubElement(el, "name"), "text").text = q.id
        _text_el(el, "questiontext", rec["stem"])
        _text_el(el, "generalfeedback", rec["general"])
        for tag, value in (("defaultgrade", "1"), ("penalty", "0"), ("hidden", "0"), ("idnumber", q.id)):
            ET.SubElement(el, tag).text = value
        if q.kind == "numeric":
            for fraction, value, tol, feedback in (("100", _num(rec["answer"]), _num(rec["tolerance"]), rec["right"]),
                                                   ("0", "*", "0", rec["wrong"])):  # "*": any other number
                a = ET.SubElement(el, "answer", {"fraction": fraction, "format": "moodle_auto_format"})
                ET.SubElement(a, "text").text = value
                ET.SubElement(a, "tolerance").text = tol
                _text_el(a, "feedback", feedback)
            for tag, value in (("unitgradingtype", "0"), ("unitpenalty", "0"),
                               ("showunits", "3"), ("unitsleft", "0")):
                ET.SubElement(el, tag).text = value
            continue
        shuffle = str(q.shuffled).lower()
        for tag, value in (("single", str(q.kind == "single").lower()), ("shuffleanswers", shuffle),
                           ("answernumbering", "ABCD"), ("showstandardinstruction", "0")):
            ET.SubElement(el, tag).text = value
        _text_el(el, "correctfeedback", "正确。")
        _text_el(el, "partiallycorrectfeedback", "部分正确（课程里多选题全对才得分）。")
        _text_el(el, "incorrectfeedback", "不对。")
        for o in rec["options"]:
            a = ET.SubElement(el, "answer", {"fraction": _grade(100 * o["fraction"]), "format": "html"})
            ET.SubElement(a, "text").text = _html(o["text"])
            _text_el(a, "feedback", o["feedback"])
    ET.indent(quiz)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(quiz, encoding="unicode") + "\n"


def _q(tag: str) -> str:
    return f"{{{QTI_NS}}}{tag}"


def _sub(parent: ET.Element, tag: str, attrs: dict[str, str] | None = None,
         text: str | None = None) -> ET.Element:
    el = ET.SubElement(parent, _q(tag), attrs or {})
    el.text = text
    return el


def _set_outcome(parent: ET.Element, ident: str) -> ET.Element:
    return _sub(parent, "setOutcomeValue", {"identifier": ident})


def _base(parent: ET.Element, base: str, value: str) -> None:
    _sub(parent, "baseValue", {"baseType": base}, value)


def _qti_item(q: Question) -> ET.Element:
    rec = _record(q)
    item = ET.Element(_q("assessmentItem"), {
        f"{{{_XSI}}}schemaLocation": f"{QTI_NS} {_QTI_XSD}",
        "identifier": q.id, "title": f"{q.bank} {q.id}", "adaptive": "false",
        "timeDependent": "false", _XML_LANG: "zh-CN"})
    rd = _sub(item, "responseDeclaration", {
        "identifier": "RESPONSE", "cardinality": "multiple" if q.kind == "multi" else "single",
        "baseType": "float" if q.kind == "numeric" else "identifier"})
    cr = _sub(rd, "correctResponse")
    keys = [_num(rec["answer"])] if q.kind == "numeric" else [o["id"] for o in rec["options"] if o["correct"]]
    for key in keys:
        _sub(cr, "value", None, key)
    if q.kind == "multi":
        m = _sub(rd, "mapping", {"lowerBound": "0", "upperBound": "1", "defaultValue": "0"})
        for o in rec["options"]:
            _sub(m, "mapEntry", {"mapKey": o["id"], "mappedValue": _num(o["fraction"])})
    for ident, card, base, default in (("SCORE", "single", "float", "0"),
                                       ("MAXSCORE", "single", "float", "1"),
                                       ("FEEDBACK", "multiple", "identifier", None)):
        od = _sub(item, "outcomeDeclaration",
                  {"identifier": ident, "cardinality": card, "baseType": base})
        if default is not None:
            _sub(_sub(od, "defaultValue"), "value", None, default)
    body = _sub(item, "itemBody")
    rp = ET.Element(_q("responseProcessing"))
    cond = _sub(rp, "responseCondition")
    if q.kind == "numeric":
        _sub(body, "p", None, rec["stem"])
        p = _sub(body, "p")
        _sub(p, "textEntryInteraction", {"responseIdentifier": "RESPONSE", "expectedLength": "16"})
        if q.unit:
            p[-1].tail = f" {q.unit}"
        rif = _sub(cond, "responseIf")
        eq = _sub(rif, "equal", {"toleranceMode": "absolute",
                                 "tolerance": f"{_num(rec['tolerance'])} {_num(rec['tolerance'])}",
                                 "includeLowerBound": "true", "includeUpperBound": "true"})
        _sub(eq, "variable", {"identifier": "RESPONSE"})
        _sub(eq, "correct", {"identifier": "RESPONSE"})
        _base(_set_outcome(rif, "SCORE"), "float", "1")
        for branch, verdict in ((rif, "CORRECT"), (_sub(cond, "responseElse"), "INCORRECT")):
            mult = _sub(_set_outcome(branch, "FEEDBACK"), "multiple")
            _base(mult, "identifier", verdict)
            _base(mult, "identifier", "EXPLANATION")
        feedback = [("CORRECT", rec["right"]), ("INCORRECT", rec["wrong"]),
                    ("EXPLANATION", rec["general"])]
    else:
        ci = _sub(body, "choiceInteraction", {
            "responseIdentifier": "RESPONSE", "shuffle": "true" if q.shuffled else "false",
            "maxChoices": "1" if q.kind == "single" else "0", "minChoices": "0"})
        _sub(ci, "prompt", None, rec["stem"])
        for o in rec["options"]:
            _sub(ci, "simpleChoice", {"identifier": o["id"]}, o["text"])
        rif = _sub(cond, "responseIf")
        if q.kind == "single":
            match = _sub(rif, "match")
            _sub(match, "variable", {"identifier": "RESPONSE"})
            _sub(match, "correct", {"identifier": "RESPONSE"})
            _base(_set_outcome(rif, "SCORE"), "float", "1")
        else:
            _sub(_sub(rif, "isNull"), "variable", {"identifier": "RESPONSE"})
            _base(_set_outcome(rif, "SCORE"), "float", "0")
            _sub(_set_outcome(_sub(cond, "responseElse"), "SCORE"), "mapResponse",
                 {"identifier": "RESPONSE"})
        mult = _sub(_set_outcome(rp, "FEEDBACK"), "multiple")
        _sub(mult, "variable", {"identifier": "RESPONSE"})
        _base(mult, "identifier", "EXPLANATION")
        feedback = [*((o["id"], o["feedback"]) for o in rec["options"]), ("EXPLANATION", rec["general"])]
    item.append(rp)
    for ident, text in feedback:
        _sub(item, "modalFeedback", {"outcomeIdentifier": "FEEDBACK", "identifier": ident,
                                     "showHide": "show"}, text)
    return item


def _xml_bytes(root: ET.Element) -> bytes:
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8",
                                                                       xml_declaration=False) + b"\n"


def qti_package(bank: Bank) -> bytes:
    """The bank as an IMS QTI 2.1 content package (zip bytes; see the module docstring)."""
    ET.register_namespace("", QTI_NS)
    ET.register_namespace("xsi", _XSI)
    files: dict[str, bytes] = {}
    test = ET.Element(_q("assessmentTest"), {
        f"{{{_XSI}}}schemaLocation": f"{QTI_NS} {_QTI_XSD}",
        "identifier": f"TEST-{bank.name}", "title": f"batchlab {bank.name}"})
    part = _sub(test, "testPart", {"identifier": "PART-1", "navigationMode": "nonlinear",
                                   "submissionMode": "individual"})
    section = _sub(part, "assessmentSection", {"identifier": "SECTION-1", "title": bank.name,
                                               "visible": "true"})
    for q in bank:
        href = f"items/{q.id}.xml"
        files[href] = _xml_bytes(_qti_item(q))
        _sub(section, "assessmentItemRef", {"identifier": q.id, "href": href})
    files[f"{bank.name}.xml"] = _xml_bytes(test)
    ET.register_namespace("", _CP_NS)
    cp = f"{{{_CP_NS}}}"
    man = ET.Element(f"{cp}manifest", {"identifier": f"MANIFEST-{bank.name}",
                                       f"{{{_XSI}}}schemaLocation": f"{_CP_NS} {_CP_XSD}"})
    meta = ET.SubElement(man, f"{cp}metadata")
    for tag, text in (("schema", "QTIv2.1 Package"), ("schemaversion", "1.0.0")):
        ET.SubElement(meta, f"{cp}{tag}").text = text
    ET.SubElement(man, f"{cp}organizations")
    res = ET.SubElement(man, f"{cp}resources")
    for ident, kind, href in [*((f"RES-{q.id}", "item", f"items/{q.id}.xml") for q in bank),
                              (f"RES-TEST-{bank.name}", "test", f"{bank.name}.xml")]:
        r = ET.SubElement(res, f"{cp}resource", {"identifier": ident, "type": f"imsqti_{kind}_xmlv2p1",
                                                 "href": href})
        ET.SubElement(r, f"{cp}file", {"href": href})
    for q in bank:
        ET.SubElement(r, f"{cp}dependency", {"identifierref": f"RES-{q.id}"})
    files = {"imsmanifest.xml": _xml_bytes(man), **files}
    ET.register_namespace("", QTI_NS)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()
