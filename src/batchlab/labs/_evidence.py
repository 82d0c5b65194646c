"""A check's evidence as plain JSON, and back. Decoding builds only plain data, numeric numpy
values, `InferenceServerException`s and behaviourless stand-ins: nothing is unpickled, imported or run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from tritonclient.utils import InferenceServerException

#: Numpy dtype kinds that travel as data (bool, signed, unsigned, float).
_KINDS = "biuf"
MAX_ELEMENTS = 2_000_000      # per array
MAX_STRING = 200_000          # characters per string
MAX_EVIDENCE_DEPTH = 24
MAX_ITEMS = 200_000           # per list / dict


class EvidenceError(ValueError):
    """Evidence that is not what a check cell writes (wrong shape, too big, unknown tag)."""


class StandIn:
    """Base of the stand-ins for objects that do not travel as data."""

    _repr = "<object>"
    _is_callable = False

    def __repr__(self) -> str:
        return self._repr


_STANDIN_CLASSES: dict[tuple[str, str], type] = {}


def standin(type_name: str, module: str, text: str = "", is_callable: bool = False) -> StandIn:
    """A stand-in object whose class is called `type_name` in module `module`."""
    type_name = type_name if type_name.isidentifier() else "object"
    if (type_name, module) not in _STANDIN_CLASSES:
        _STANDIN_CLASSES[type_name, module] = type(type_name, (StandIn,), {"__module__": module})
    obj = _STANDIN_CLASSES[type_name, module]()
    obj._repr = str(text)[:300] or f"<{type_name}>"
    obj._is_callable = bool(is_callable)
    return obj


def to_evidence(value: Any, depth: int = 0) -> Any:
    """`value` as JSON-able data (see `from_evidence`); objects that are not data become stand-in records."""
    if depth > MAX_EVIDENCE_DEPTH:
        return {"__obj__": ["object", "", "<nested too deep>", False]}
    if value is None or isinstance(value, (bool, str)):
        return value[:MAX_STRING] if isinstance(value, str) else value
    if isinstance(value, int) and not isinstance(value, bool):
        return value if abs(value) < 2 ** 62 else {"__bigint__": str(value)}
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, np.generic) and value.dtype.kind in _KINDS:
        return {"__np__": [value.dtype.str, to_evidence(value.item())]}
    if isinstance(value, np.ndarray) and value.dtype.kind in _KINDS and value.size <= MAX_ELEMENTS:
        flat = [to_evidence(x) for x in value.reshape(-1).tolist()]
        return {"__nd__": [value.dtype.str, list(value.shape), flat]}
    if isinstance(value, InferenceServerException):
        return {"__ise__": [str(value.message() or ""), str(value.status() or ""), str(value.debug_details() or "")]}
    if isinstance(value, (list, tuple, set, frozenset)) and len(value) <= MAX_ITEMS:
        items = [to_evidence(x, depth + 1) for x in value]
        if isinstance(value, list):
            return items
        return {"__tuple__": items} if isinstance(value, tuple) else {"__set__": items}
    if isinstance(value, Mapping) and type(value).__module__ in ("builtins", "collections") and len(value) <= MAX_ITEMS:
        return {"__dict__": [[to_evidence(k, depth + 1), to_evidence(v, depth + 1)] for k, v in value.items()]}
    try:
        text = repr(value)
    except Exception:  # a learner's object whose repr raises
        text = "<unprintable>"
    cls = type(value)
    return {"__obj__": [cls.__name__, cls.__module__ or "", text[:300], callable(value)]}


def from_evidence(data: Any, depth: int = 0) -> Any:
    """The value `to_evidence` wrote (stand-ins for objects); raises EvidenceError on anything else."""
    if depth > MAX_EVIDENCE_DEPTH + 2:
        raise EvidenceError("evidence nested too deep")
    if data is None or isinstance(data, (bool, int, float)):
        return data
    if isinstance(data, str):
        if len(data) > MAX_STRING:
            raise EvidenceError("string too long")
        return data
    if isinstance(data, list):
        if len(data) > MAX_ITEMS:
            raise EvidenceError("list too long")
        return [from_evidence(x, depth + 1) for x in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise EvidenceError(f"not evidence: {type(data).__name__}")
    (tag, body), = data.items()
    if tag == "__float__":
        if body not in ("nan", "inf", "-inf"):
            raise EvidenceError(f"bad float {body!r}")
        return float(body)
    if tag == "__bigint__":
        return int(str(body)[:100])
    if tag in ("__tuple__", "__set__"):
        items = from_evidence(body, depth + 1)
        if not isinstance(items, list):
            raise EvidenceError("bad sequence")
        return tuple(items) if tag == "__tuple__" else set(_hashable(x) for x in items)
    if tag == "__dict__":
        if not isinstance(body, list) or len(body) > MAX_ITEMS:
            raise EvidenceError("bad dict")
        out = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise EvidenceError("bad dict entry")
            out[_hashable(from_evidence(pair[0], depth + 1))] = from_evidence(pair[1], depth + 1)
        return out
    if tag in ("__np__", "__nd__"):
        return _decode_numpy(tag, body)
    if tag == "__ise__":
        msg, status, debug = (list(body) + ["", "", ""])[:3] if isinstance(body, list) else ("", "", "")
        return InferenceServerException(str(msg), status=str(status) or None, debug_details=str(debug) or None)
    if tag == "__obj__":
        name, module, text, is_callable = (list(body) + ["object", "", "", False])[:4] if isinstance(body, list) else (
            "object", "", "", False)
        return standin(str(name), str(module), str(text), bool(is_callable))
    raise EvidenceError(f"unknown evidence tag {tag!r}")


def _hashable(x: Any) -> Any:
    try:
        hash(x)
    except TypeError:
        raise EvidenceError("unhashable dict key or set item") from None
    return x


def _dtype(text: Any) -> np.dtype:
    try:
        dt = np.dtype(str(text))
    except TypeError:
        raise EvidenceError(f"bad dtype {text!r}") from None
    if dt.kind not in _KINDS or dt.itemsize > 16:
        raise EvidenceError(f"dtype {dt} does not travel as data")
    return dt


def _decode_numpy(tag: str, body: Any) -> Any:
    if tag == "__np__":
        if not isinstance(body, list) or len(body) != 2:
            raise EvidenceError("bad numpy scalar")
        return _dtype(body[0]).type(from_evidence(body[1]))
    if not isinstance(body, list) or len(body) != 3 or not isinstance(body[1], list):
        raise EvidenceError("bad numpy array")
    dt = _dtype(body[0])
    shape = [int(s) for s in body[1]]
    if any(s < 0 for s in shape) or math.prod(shape) > MAX_ELEMENTS or not isinstance(body[2], list):
        raise EvidenceError("bad numpy array shape")
    flat = [from_evidence(x) for x in body[2]]
    if len(flat) != math.prod(shape):
        raise EvidenceError("numpy array data does not match its shape")
    return np.asarray(flat, dtype=dt).reshape(shape)
