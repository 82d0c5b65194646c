"""Export banks to the formats learning platforms import: Moodle XML and an IMS QTI 2.1 package.

    python -m batchlab.quiz export --bank ch02 --format moodle > ch02.xml
    python -m batchlab.quiz export --bank ch02 --format qti -o ch02-qti.zip

**Moodle XML** (`moodle_xml`): one `<question type="category">`, then per question a
`multichoice` (single: the key 100 %, distractors 0; multi-select: each key `100/k` %, each
distractor `-100/(n-k)` %, so partial credit never rewards ticking everything), or a
`numerical` with an absolute tolerance (a relative one is converted for the exported value).
Option feedback, the explanation (`generalfeedback`) and any 勘误 travel with it; chapter banks
are marked `shuffleanswers`. Every fraction is one of the grades Moodle's importer accepts.

**QTI 2.1** (`qti_package`): a zip with `imsmanifest.xml` (IMS Content Packaging 1.1), one
`assessmentItem` per question (`choiceInteraction` with the stable option ids as choice
identifiers, or `textEntryInteraction` with `<equal toleranceMode=… tolerance=…>`), per-option
and explanation `modalFeedback`, and an `assessmentTest` that lists the items in bank order.

Seeded numeric questions are exported as one fixed instance (the bank's default parameters) and
the stem says so. `parse_moodle` / `parse_qti` read an export back into plain dicts, and
`check_moodle` / `check_qti` check its structure against the formats' rules (element order,
required attributes, identifiers, fractions, declared variables) without a schema file; the
tests use both for a round trip of every bank.
"""

from __future__ import annotations

import html
import io
import math
import re
import xml.etree.ElementTree as ET
import zipfile
from typing import Any

from batchlab.quiz.bank import Bank, Question, right_feedback

__all__ = [
    "FIXED_INSTANCE_NOTE",
    "MOODLE_FRACTIONS",
    "QTI_NS",
    "check_moodle",
    "check_qti",
    "moodle_xml",
    "parse_moodle",
    "parse_qti",
    "qti_package",
    "question_record",
]

QTI_NS = "http://www.imsglobal.org/xsd/imsqti_v2p1"
_CP_NS = "http://www.imsglobal.org/xsd/imscp_v1p1"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_QTI_XSD = "http://www.imsglobal.org/xsd/qti/qtiv2p1/imsqti_v2p1.xsd"
_CP_XSD = "http://www.imsglobal.org/xsd/imscp_v1p1.xsd"

FIXED_INSTANCE_NOTE = "（导出为固定实例：参数取题库的默认值；在课程里每位学员的数字各不相同。）"
"""Appended to the stem of a seeded numeric question in every export."""

MOODLE_FRACTIONS = (100, 90, 83.33333, 80, 75, 70, 66.66667, 60, 50, 40, 33.33333, 30, 25, 20,
                    16.66667, 14.28571, 12.5, 11.11111, 10, 5, 0)
"""The answer grades (percent) Moodle's question importer accepts, and their negatives."""

_ALLOWED = {round(s * f, 5) for f in MOODLE_FRACTIONS for s in (1, -1)}


def _grade(share: float) -> str:
    """A percent as Moodle writes it, snapped to its grade list (ValueError if off the list)."""
    for f in MOODLE_FRACTIONS:
        for s in (1, -1):
            if abs(share - s * f) < 1e-4:
                v = s * f
                return f"{v:.7g}" if v != int(v) else str(int(v))
    raise ValueError(f"{share:g} % is not a grade Moodle accepts")


def _num(x: float) -> str:
    return f"{x:.10g}"


def question_record(q: Question) -> dict[str, Any]:
    """The exported content of one question as plain data: what a round trip must preserve.

    `{"id", "kind", "stem", "explanation", "erratum", "options": [{"id", "text", "correct",
    "fraction", "feedback"}], "answer", "tolerance", "wrong_feedback"}` (choice questions have no
    answer/tolerance; numeric questions no options). Fractions are shares of 1.
    """
    inst = q.instance(None, article_order=True)
    stem = inst.stem + (FIXED_INSTANCE_NOTE if q.seeded else "")
    expl = inst.explanation
    rec: dict[str, Any] = {"id": q.id, "kind": q.kind, "stem": stem, "explanation": expl,
                           "erratum": q.erratum or ""}
    if q.kind == "numeric":
        value = float(inst.expected)
        fb = [a for a in q.raw["answers"] if a.get("type") == "default"]
        rec.update(answer=value, tolerance=q.tolerance(value),
                   right_feedback=right_feedback(q.raw), options=[],
                   wrong_feedback=fb[0]["feedback"] if fb else "")
        return rec
    keyed = set(q.key_ids)
    n, k = len(q.option_ids), len(keyed)
    opts = []
    for oid in q.option_ids:
        a = q.option(oid)
        if q.kind == "single":
            frac = 1.0 if oid in keyed else 0.0
        else:
            frac = 1.0 / k if oid in keyed else (-1.0 / (n - k) if n > k else 0.0)
        opts.append({"id": oid, "text": a["answer"], "correct": oid in keyed, "fraction": frac,
                     "feedback": a["feedback"]})
    rec["options"] = opts
    return rec


# --- Moodle XML -----------------------------------------------------------------------------


def _html(text: str) -> str:
    return html.escape(text, quote=False).replace("\n", "<br>")


def _unhtml(text: str) -> str:
    return html.unescape(re.sub(r"<br\s*/?>", "\n", text or ""))


def _text_el(parent: ET.Element, tag: str, text: str, fmt: str | None = "html") -> ET.Element:
    el = ET.SubElement(parent, tag, {"format": fmt} if fmt else {})
    ET.SubElement(el, "text").text = _html(text) if fmt == "html" else text
    return el


def _general_feedback(rec: dict[str, Any]) -> str:
    return rec["explanation"] + (f"\n\n勘误：{rec['erratum']}" if rec["erratum"] else "")


def moodle_xml(bank: Bank) -> str:
    """The bank as a Moodle XML question file (see the module docstring)."""
    quiz = ET.Element("quiz")
    cat = ET.SubElement(quiz, "question", {"type": "category"})
    c = ET.SubElement(cat, "category")
    ET.SubElement(c, "text").text = f"$course$/top/batchlab/{bank.name}"
    _text_el(cat, "info", f"batchlab 题库 {bank.name}（{len(bank)} 题）")
    for q in bank:
        rec = question_record(q)
        kind = "numerical" if q.kind == "numeric" else "multichoice"
        el = ET.SubElement(quiz, "question", {"type": kind})
        name = ET.SubElement(el, "name")
        ET.SubElement(name, "text").text = q.id
        _text_el(el, "questiontext", rec["stem"])
        _text_el(el, "generalfeedback", _general_feedback(rec))
        ET.SubElement(el, "defaultgrade").text = "1"
        ET.SubElement(el, "penalty").text = "0"
        ET.SubElement(el, "hidden").text = "0"
        ET.SubElement(el, "idnumber").text = q.id
        if q.kind == "numeric":
            a = ET.SubElement(el, "answer", {"fraction": "100", "format": "moodle_auto_format"})
            ET.SubElement(a, "text").text = _num(rec["answer"])
            ET.SubElement(a, "tolerance").text = _num(rec["tolerance"])
            _text_el(a, "feedback", rec["right_feedback"])
            other = ET.SubElement(el, "answer", {"fraction": "0", "format": "moodle_auto_format"})
            ET.SubElement(other, "text").text = "*"
            ET.SubElement(other, "tolerance").text = "0"
            _text_el(other, "feedback", rec["wrong_feedback"])
            for tag, value in (("unitgradingtype", "0"), ("unitpenalty", "0"),
                               ("showunits", "3"), ("unitsleft", "0")):
                ET.SubElement(el, tag).text = value
            continue
        ET.SubElement(el, "single").text = "true" if q.kind == "single" else "false"
        ET.SubElement(el, "shuffleanswers").text = "true" if q.shuffled else "false"
        ET.SubElement(el, "answernumbering").text = "ABCD"
        ET.SubElement(el, "showstandardinstruction").text = "0"
        _text_el(el, "correctfeedback", "正确。")
        _text_el(el, "partiallycorrectfeedback", "部分正确（课程里多选题全对才得分）。")
        _text_el(el, "incorrectfeedback", "不对。")
        for o in rec["options"]:
            a = ET.SubElement(el, "answer", {"fraction": _grade(100 * o["fraction"]), "format": "html"})
            ET.SubElement(a, "text").text = _html(o["text"])
            _text_el(a, "feedback", o["feedback"])
    ET.indent(quiz)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(quiz, encoding="unicode") + "\n"


def _need(el: ET.Element | None, what: str) -> ET.Element:
    if el is None:
        raise ValueError(f"missing {what}")
    return el


def _text_of(el: ET.Element, tag: str, where: str) -> str:
    t = _need(el.find(f"{tag}/text"), f"<{tag}><text> in {where}")
    return t.text or ""


def check_moodle(text: str) -> int:
    """Check a Moodle XML question file's structure; returns the number of questions or raises
    ValueError naming the question and the problem."""
    root = ET.fromstring(text)
    if root.tag != "quiz":
        raise ValueError(f"root element is <{root.tag}>, not <quiz>")
    n = 0
    for i, q in enumerate(root.findall("question"), 1):
        kind = q.get("type")
        if kind == "category":
            if not (_text_of(q, "category", "category").strip()):
                raise ValueError("empty category")
            continue
        where = f"question #{i}"
        name = _text_of(q, "name", where).strip()
        if not name:
            raise ValueError(f"{where}: empty <name>")
        where = name
        if kind not in ("multichoice", "numerical"):
            raise ValueError(f"{where}: unexpected question type {kind!r}")
        qt = _need(q.find("questiontext"), f"<questiontext> in {where}")
        if qt.get("format") not in ("html", "moodle_auto_format", "plain_text", "markdown"):
            raise ValueError(f"{where}: questiontext format {qt.get('format')!r}")
        if not _text_of(q, "questiontext", where).strip():
            raise ValueError(f"{where}: empty question text")
        answers = q.findall("answer")
        fracs = []
        for a in answers:
            try:
                f = float(a.get("fraction", "x"))
            except ValueError:
                raise ValueError(f"{where}: answer fraction {a.get('fraction')!r} is not a number") from None
            if round(f, 5) not in _ALLOWED:
                raise ValueError(f"{where}: fraction {f:g} is not one of Moodle's grades")
            fracs.append(f)
            _need(a.find("text"), f"<answer><text> in {where}")
        if kind == "numerical":
            right = [a for a, f in zip(answers, fracs) if f == 100]
            if not right:
                raise ValueError(f"{where}: a numerical question needs a 100 % answer")
            for a in right:
                float(_need(a.find("text"), "answer text").text or "x")
                tol = float(_need(a.find("tolerance"), f"<tolerance> in {where}").text or "x")
                if not math.isfinite(tol) or tol < 0:
                    raise ValueError(f"{where}: tolerance {tol} must be ≥ 0")
        else:
            single = _need(q.find("single"), f"<single> in {where}").text
            if single not in ("true", "false"):
                raise ValueError(f"{where}: <single> must be true or false")
            if (q.findtext("shuffleanswers") or "") not in ("true", "false", "1", "0"):
                raise ValueError(f"{where}: <shuffleanswers> must be true/false")
            if (q.findtext("answernumbering") or "") not in ("abc", "ABCD", "123", "iii", "IIII", "none"):
                raise ValueError(f"{where}: unknown <answernumbering>")
            if len(answers) < 2:
                raise ValueError(f"{where}: a multichoice question needs at least 2 answers")
            if single == "true" and (max(fracs) != 100 or sum(f == 100 for f in fracs) != 1):
                raise ValueError(f"{where}: a single-answer question needs exactly one 100 % answer")
            if single == "false" and abs(sum(f for f in fracs if f > 0) - 100) > 0.01:
                raise ValueError(f"{where}: the positive fractions of a multi-answer question "
                                 f"sum to {sum(f for f in fracs if f > 0):g}, not 100")
        n += 1
    if n == 0:
        raise ValueError("no questions")
    return n


def parse_moodle(text: str) -> list[dict[str, Any]]:
    """Read a Moodle XML export back into `question_record`-shaped dicts (option ids cannot
    travel through Moodle XML and come back as None)."""
    out = []
    for q in ET.fromstring(text).findall("question"):
        if q.get("type") == "category":
            continue
        rec: dict[str, Any] = {"id": q.findtext("idnumber") or _text_of(q, "name", "question"),
                               "stem": _unhtml(_text_of(q, "questiontext", "question"))}
        general = _unhtml(_text_of(q, "generalfeedback", rec["id"]))
        expl, _, err = general.partition("\n\n勘误：")
        rec.update(explanation=expl, erratum=err)
        answers = q.findall("answer")
        if q.get("type") == "numerical":
            right = next(a for a in answers if float(a.get("fraction")) == 100)
            wrong = [a for a in answers if a.findtext("text") == "*"]
            rec.update(kind="numeric", answer=float(right.findtext("text")),
                       tolerance=float(right.findtext("tolerance")),
                       right_feedback=_unhtml(right.findtext("feedback/text") or ""),
                       wrong_feedback=_unhtml(wrong[0].findtext("feedback/text") or "") if wrong else "",
                       options=[])
        else:
            rec["kind"] = "single" if q.findtext("single") == "true" else "multi"
            rec["shuffle"] = q.findtext("shuffleanswers") in ("true", "1")
            rec["options"] = [{"id": None, "text": _unhtml(a.findtext("text") or ""),
                               "fraction": float(a.get("fraction")) / 100,
                               "correct": float(a.get("fraction")) > 0,
                               "feedback": _unhtml(a.findtext("feedback/text") or "")}
                              for a in answers]
        out.append(rec)
    return out


# --- QTI 2.1 --------------------------------------------------------------------------------


def _q(tag: str) -> str:
    return f"{{{QTI_NS}}}{tag}"


def _sub(parent: ET.Element, tag: str, attrs: dict[str, str] | None = None,
         text: str | None = None) -> ET.Element:
    el = ET.SubElement(parent, _q(tag), attrs or {})
    if text is not None:
        el.text = text
    return el


def _set_outcome(parent: ET.Element, ident: str) -> ET.Element:
    return _sub(parent, "setOutcomeValue", {"identifier": ident})


def _base(parent: ET.Element, base: str, value: str) -> None:
    _sub(parent, "baseValue", {"baseType": base}, value)


def _qti_item(q: Question) -> ET.Element:
    rec = question_record(q)
    item = ET.Element(_q("assessmentItem"), {
        f"{{{_XSI}}}schemaLocation": f"{QTI_NS} {_QTI_XSD}",
        "identifier": q.id, "title": f"{q.bank} {q.id}", "adaptive": "false",
        "timeDependent": "false", _XML_LANG: "zh-CN"})
    if q.kind == "numeric":
        rd = _sub(item, "responseDeclaration",
                  {"identifier": "RESPONSE", "cardinality": "single", "baseType": "float"})
        _sub(_sub(rd, "correctResponse"), "value", None, _num(rec["answer"]))
    else:
        card = "single" if q.kind == "single" else "multiple"
        rd = _sub(item, "responseDeclaration",
                  {"identifier": "RESPONSE", "cardinality": card, "baseType": "identifier"})
        cr = _sub(rd, "correctResponse")
        for o in rec["options"]:
            if o["correct"]:
                _sub(cr, "value", None, o["id"])
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
        feedback = [("CORRECT", rec["right_feedback"]), ("INCORRECT", rec["wrong_feedback"]),
                    ("EXPLANATION", _general_feedback(rec))]
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
        feedback = [(o["id"], o["feedback"]) for o in rec["options"]]
        feedback.append(("EXPLANATION", _general_feedback(rec)))
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
    ET.SubElement(meta, f"{cp}schema").text = "QTIv2.1 Package"
    ET.SubElement(meta, f"{cp}schemaversion").text = "1.0.0"
    ET.SubElement(man, f"{cp}organizations")
    res = ET.SubElement(man, f"{cp}resources")
    for q in bank:
        href = f"items/{q.id}.xml"
        r = ET.SubElement(res, f"{cp}resource", {"identifier": f"RES-{q.id}",
                                                 "type": "imsqti_item_xmlv2p1", "href": href})
        ET.SubElement(r, f"{cp}file", {"href": href})
    t = ET.SubElement(res, f"{cp}resource", {"identifier": f"RES-TEST-{bank.name}",
                                             "type": "imsqti_test_xmlv2p1",
                                             "href": f"{bank.name}.xml"})
    ET.SubElement(t, f"{cp}file", {"href": f"{bank.name}.xml"})
    for q in bank:
        ET.SubElement(t, f"{cp}dependency", {"identifierref": f"RES-{q.id}"})
    files = {"imsmanifest.xml": _xml_bytes(man), **files}
    ET.register_namespace("", QTI_NS)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


_IDENT = re.compile(r"^[A-Za-z_][\w.-]*$")
_ITEM_ORDER = ["responseDeclaration", "outcomeDeclaration", "templateDeclaration",
               "templateProcessing", "stylesheet", "itemBody", "responseProcessing", "modalFeedback"]
_CARDINALITY = {"single", "multiple", "ordered", "record"}
_BASETYPES = {"identifier", "boolean", "integer", "float", "string", "point", "pair",
              "directedPair", "duration", "file", "uri", "intOrIdentifier"}


def _local(el: ET.Element) -> str:
    ns, _, name = el.tag.rpartition("}")
    if ns.lstrip("{") != QTI_NS:
        raise ValueError(f"element <{el.tag}> is not in the QTI 2.1 namespace")
    return name


def _check_item(item: ET.Element, where: str) -> dict[str, Any]:
    if _local(item) != "assessmentItem":
        raise ValueError(f"{where}: root is <{_local(item)}>, not <assessmentItem>")
    for attr in ("identifier", "title", "adaptive", "timeDependent"):
        if not item.get(attr):
            raise ValueError(f"{where}: assessmentItem needs @{attr}")
    for attr in ("adaptive", "timeDependent"):
        if item.get(attr) not in ("true", "false"):
            raise ValueError(f"{where}: @{attr} must be true or false")
    if not _IDENT.match(item.get("identifier", "")):
        raise ValueError(f"{where}: identifier {item.get('identifier')!r} is not valid")
    pos = -1
    for child in item:
        name = _local(child)
        if name not in _ITEM_ORDER:
            raise ValueError(f"{where}: <{name}> may not appear in assessmentItem")
        i = _ITEM_ORDER.index(name)
        if i < pos:
            raise ValueError(f"{where}: <{name}> out of order (QTI 2.1 fixes the sequence)")
        pos = i
    decls: dict[str, ET.Element] = {}
    outcomes: set[str] = set()
    for d in list(item.findall(_q("responseDeclaration"))) + list(item.findall(_q("outcomeDeclaration"))):
        ident = d.get("identifier", "")
        if not _IDENT.match(ident) or ident in decls or ident in outcomes:
            raise ValueError(f"{where}: bad or repeated declaration identifier {ident!r}")
        if d.get("cardinality") not in _CARDINALITY:
            raise ValueError(f"{where}: {ident}: cardinality {d.get('cardinality')!r}")
        if d.get("baseType") is not None and d.get("baseType") not in _BASETYPES:
            raise ValueError(f"{where}: {ident}: baseType {d.get('baseType')!r}")
        if _local(d) == "responseDeclaration":
            decls[ident] = d
        else:
            outcomes.add(ident)
    body = item.find(_q("itemBody"))
    if body is None:
        raise ValueError(f"{where}: no itemBody")
    interactions = [el for el in body.iter() if _local(el).endswith("Interaction")]
    if len(interactions) != 1:
        raise ValueError(f"{where}: expected one interaction, found {len(interactions)}")
    inter = interactions[0]
    rid = inter.get("responseIdentifier")
    if rid not in decls:
        raise ValueError(f"{where}: interaction answers undeclared response {rid!r}")
    decl = decls[rid]
    correct = [v.text or "" for v in decl.iterfind(f"{_q('correctResponse')}/{_q('value')}")]
    if not correct:
        raise ValueError(f"{where}: no correctResponse")
    info: dict[str, Any] = {"id": item.get("identifier"), "decl": decl, "interaction": inter}
    if _local(inter) == "choiceInteraction":
        choices = [c.get("identifier", "") for c in inter.findall(_q("simpleChoice"))]
        if len(choices) < 2 or len(set(choices)) != len(choices) or not all(_IDENT.match(c) for c in choices):
            raise ValueError(f"{where}: choices need ≥ 2 unique valid identifiers")
        if inter.find(_q("prompt")) is not None and list(inter)[0].tag != _q("prompt"):
            raise ValueError(f"{where}: <prompt> must come first in choiceInteraction")
        try:
            max_choices = int(inter.get("maxChoices", "x"))
        except ValueError:
            raise ValueError(f"{where}: maxChoices must be an integer") from None
        if inter.get("shuffle") not in ("true", "false"):
            raise ValueError(f"{where}: choiceInteraction needs shuffle true/false")
        if decl.get("baseType") != "identifier":
            raise ValueError(f"{where}: a choice response needs baseType identifier")
        if (max_choices == 1) != (decl.get("cardinality") == "single"):
            raise ValueError(f"{where}: maxChoices {max_choices} disagrees with cardinality "
                             f"{decl.get('cardinality')}")
        if not set(correct) <= set(choices):
            raise ValueError(f"{where}: correctResponse names an unknown choice")
        for e in decl.iterfind(f"{_q('mapping')}/{_q('mapEntry')}"):
            if e.get("mapKey") not in choices:
                raise ValueError(f"{where}: mapping names an unknown choice {e.get('mapKey')!r}")
            float(e.get("mappedValue", "x"))
        info["choices"] = choices
    elif _local(inter) == "textEntryInteraction":
        if decl.get("baseType") != "float" or decl.get("cardinality") != "single":
            raise ValueError(f"{where}: a numeric response must be single float")
        float(correct[0])
    else:
        raise ValueError(f"{where}: unexpected interaction <{_local(inter)}>")
    rp = item.find(_q("responseProcessing"))
    if rp is None:
        raise ValueError(f"{where}: no responseProcessing")
    for el in rp.iter():
        name = _local(el)
        ident = el.get("identifier")
        if name in ("variable", "correct", "mapResponse") and ident not in decls and ident not in outcomes:
            raise ValueError(f"{where}: responseProcessing reads undeclared {ident!r}")
        if name == "setOutcomeValue" and ident not in outcomes:
            raise ValueError(f"{where}: responseProcessing sets undeclared outcome {ident!r}")
        if name == "equal":
            if el.get("toleranceMode") not in ("exact", "absolute", "relative"):
                raise ValueError(f"{where}: equal needs toleranceMode exact/absolute/relative")
            tol = (el.get("tolerance") or "").split()
            if el.get("toleranceMode") != "exact" and not 1 <= len(tol) <= 2:
                raise ValueError(f"{where}: equal needs one or two tolerance values")
            if any(float(t) < 0 for t in tol):
                raise ValueError(f"{where}: tolerances must be ≥ 0")
    for mf in item.findall(_q("modalFeedback")):
        if mf.get("outcomeIdentifier") not in outcomes or mf.get("showHide") not in ("show", "hide") \
                or not _IDENT.match(mf.get("identifier", "")):
            raise ValueError(f"{where}: modalFeedback {mf.get('identifier')!r} is malformed")
    return info


def check_qti(data: bytes) -> int:
    """Check a QTI 2.1 package's structure (manifest, items, test); returns the number of items
    or raises ValueError naming the file and the problem."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = set(z.namelist())
        if "imsmanifest.xml" not in names:
            raise ValueError("no imsmanifest.xml")
        man = ET.fromstring(z.read("imsmanifest.xml"))
        cp = f"{{{_CP_NS}}}"
        if man.tag != f"{cp}manifest" or not man.get("identifier"):
            raise ValueError("imsmanifest.xml: root must be an identified IMS CP <manifest>")
        resources = man.findall(f"{cp}resources/{cp}resource")
        ids = [r.get("identifier") for r in resources]
        if len(set(ids)) != len(ids):
            raise ValueError("imsmanifest.xml: repeated resource identifier")
        items, tests = {}, []
        for r in resources:
            href = r.get("href")
            if href not in names:
                raise ValueError(f"imsmanifest.xml: resource {r.get('identifier')} points at "
                                 f"missing {href!r}")
            for f in r.findall(f"{cp}file"):
                if f.get("href") not in names:
                    raise ValueError(f"imsmanifest.xml: missing file {f.get('href')!r}")
            for dep in r.findall(f"{cp}dependency"):
                if dep.get("identifierref") not in ids:
                    raise ValueError(f"imsmanifest.xml: dependency on unknown {dep.get('identifierref')!r}")
            if r.get("type") == "imsqti_item_xmlv2p1":
                info = _check_item(ET.fromstring(z.read(href)), href)
                items[href] = info["id"]
            elif r.get("type") == "imsqti_test_xmlv2p1":
                tests.append(href)
            else:
                raise ValueError(f"imsmanifest.xml: unexpected resource type {r.get('type')!r}")
        for href in tests:
            test = ET.fromstring(z.read(href))
            if _local(test) != "assessmentTest":
                raise ValueError(f"{href}: root is not <assessmentTest>")
            for ref in test.iter(_q("assessmentItemRef")):
                if items.get(ref.get("href")) != ref.get("identifier"):
                    raise ValueError(f"{href}: item ref {ref.get('identifier')!r} does not match "
                                     f"an item in the package")
        if not items:
            raise ValueError("no items")
        return len(items)


def _text(el: ET.Element | None) -> str:
    return "" if el is None else "".join(el.itertext())


def parse_qti(data: bytes) -> list[dict[str, Any]]:
    """Read a QTI 2.1 package back into `question_record`-shaped dicts, in the test's order."""
    out = []
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        tests = [n for n in z.namelist() if "/" not in n and n != "imsmanifest.xml"]
        test = ET.fromstring(z.read(tests[0]))
        for ref in test.iter(_q("assessmentItemRef")):
            item = ET.fromstring(z.read(ref.get("href")))
            info = _check_item(item, ref.get("href"))
            decl = info["decl"]
            feedback = {mf.get("identifier"): _text(mf) for mf in item.findall(_q("modalFeedback"))}
            expl, _, err = feedback.get("EXPLANATION", "").partition("\n\n勘误：")
            rec: dict[str, Any] = {"id": item.get("identifier"), "explanation": expl,
                                   "erratum": err}
            correct = [v.text for v in decl.iterfind(f"{_q('correctResponse')}/{_q('value')}")]
            inter = info["interaction"]
            if _local(inter) == "textEntryInteraction":
                eq = next(item.iter(_q("equal")))
                tol = [float(t) for t in eq.get("tolerance").split()]
                rec.update(kind="numeric", stem=_text(item.find(f"{_q('itemBody')}/{_q('p')}")),
                           answer=float(correct[0]), tolerance=tol[0],
                           tolerance_mode=eq.get("toleranceMode"),
                           right_feedback=feedback.get("CORRECT", ""),
                           wrong_feedback=feedback.get("INCORRECT", ""), options=[])
            else:
                rec["kind"] = "single" if decl.get("cardinality") == "single" else "multi"
                rec["stem"] = _text(inter.find(_q("prompt")))
                rec["shuffle"] = inter.get("shuffle") == "true"
                mapping = {e.get("mapKey"): float(e.get("mappedValue"))
                           for e in decl.iterfind(f"{_q('mapping')}/{_q('mapEntry')}")}
                rec["options"] = [
                    {"id": c.get("identifier"), "text": _text(c),
                     "correct": c.get("identifier") in correct,
                     "fraction": mapping.get(c.get("identifier"),
                                             1.0 if c.get("identifier") in correct else 0.0),
                     "feedback": feedback.get(c.get("identifier"), "")}
                    for c in inter.findall(_q("simpleChoice"))]
            out.append(rec)
    return out
