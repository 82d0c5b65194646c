"""Helpers shared by the course's Python-backend models: config, inputs, validation, responses.

Validation is pure numpy (`InputError` names the problem); Triton objects come from
`triton_python_backend_utils` via `pb()` (a test may install a stand-in under that name).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from batchlab.lm.vocab import PAD_ID


class InputError(ValueError):
    """A request's inputs are invalid; the message goes back to the client."""


def pb() -> Any:
    """The `triton_python_backend_utils` module of the running stub."""
    import triton_python_backend_utils as mod  # a test's stand-in when it put one in sys.modules
    return mod


def parameters(config: dict) -> dict[str, str]:
    """The config's `parameters { key: ... value { string_value: ... } }` as a plain dict."""
    return {key: value.get("string_value", "") if isinstance(value, dict) else str(value)
            for key, value in (config.get("parameters") or {}).items()}


def _param(params: dict[str, str], key: str, cast: Any, what: str) -> Any:
    raw = params.get(key)
    if raw is None or raw == "":
        return None
    try:
        return cast(raw)
    except ValueError:
        raise ValueError(f"config parameter {key}={raw!r} is not {what}") from None


def int_param(params: dict[str, str], key: str, default: int, lo: int = 1,
              hi: int | None = None) -> int:
    """An integer config parameter within [lo, hi]; ValueError (model fails to load) if not."""
    value = _param(params, key, int, "an integer")
    if value is None:
        return default
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"config parameter {key}={value} is outside [{lo}, {hi}]")
    return value


def choice_param(params: dict[str, str], key: str, default: str, options: tuple[str, ...]) -> str:
    """A config parameter that must be one of `options`; ValueError if not."""
    value = _param(params, key, str, "text")
    if value is None:
        return default
    if value not in options:
        raise ValueError(f"config parameter {key}={value!r} is not one of {', '.join(options)}")
    return value


def float_param(params: dict[str, str], key: str, default: float, lo: float = 0.0) -> float:
    """A float config parameter >= lo; ValueError if not."""
    value = _param(params, key, float, "a number")
    if value is None:
        return default
    if not np.isfinite(value) or value < lo:
        raise ValueError(f"config parameter {key}={value} must be a finite number >= {lo}")
    return value


def sequence_idle_seconds(config: dict, default: float = 1.0) -> float:
    """`sequence_batching.max_sequence_idle_microseconds` in seconds (Triton's default 1 s)."""
    sb = config.get("sequence_batching") or {}
    us = int(sb.get("max_sequence_idle_microseconds") or 0)
    return us / 1e6 if us > 0 else default


def get(request: Any, name: str) -> np.ndarray | None:
    """Input `name` of a request as numpy, or None when the client did not send it."""
    tensor = pb().get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def require(request: Any, name: str) -> np.ndarray:
    """Input `name`, or InputError when it is missing."""
    arr = get(request, name)
    if arr is None:
        raise InputError(f"input {name} is missing")
    return arr


def expect_dtype(arr: np.ndarray, name: str, kinds: str) -> None:
    """InputError unless arr's dtype kind is one of `kinds` ('i' int, 'u' uint, 'f', 'b')."""
    if arr.dtype.kind not in kinds:
        raise InputError(f"input {name} has dtype {arr.dtype}, expected "
                         + {"iu": "an integer type", "f": "a float type", "b": "BOOL"}.get(
                             kinds, kinds))


def rows_of(arr: np.ndarray, name: str, ndim: int) -> int:
    """Batch rows of a batched input (first dimension) after checking its rank."""
    if arr.ndim != ndim:
        raise InputError(f"input {name} has shape {list(arr.shape)}, expected {ndim} dimensions")
    if arr.shape[0] < 1:
        raise InputError(f"input {name} has no rows")
    return int(arr.shape[0])


def per_row_scalar(arr: np.ndarray | None, name: str, rows: int, default: float | int | bool
                   ) -> np.ndarray:
    """A [rows, 1] (batched) or [1] (unbatched) scalar input as a length-`rows` array."""
    if arr is None:
        return np.full(rows, default)
    flat = np.asarray(arr).reshape(-1)
    if flat.size != rows:
        raise InputError(f"input {name} has shape {list(np.shape(arr))}: expected one value "
                         f"per prompt ({rows})")
    return flat


def check_token_rows(tokens: np.ndarray, name: str, vocab_size: int, length: int) -> np.ndarray:
    """Validate fixed-length rows (R, length) padded at the end with ``<pad>``; return int64."""
    expect_dtype(tokens, name, "iu")
    rows_of(tokens, name, 2)
    if tokens.shape[1] != length:
        raise InputError(f"input {name} rows must hold exactly {length} token ids, "
                         f"got {tokens.shape[1]}")
    bad = (tokens < 0) | (tokens >= vocab_size)
    if bad.any():
        raise InputError(f"input {name} holds token id {int(tokens[bad][0])}, outside the "
                         f"vocabulary [0, {vocab_size})")
    real = tokens != PAD_ID
    if not real[:, 0].all():
        raise InputError(f"input {name}: a row starts with <pad> (id 0); pad only at the end")
    if (real[:, 1:] & ~real[:, :-1]).any():
        raise InputError(f"input {name}: a real token follows <pad>; pad only at the end")
    return tokens.astype(np.int64)


def control_value(request: Any, name: str) -> int:
    """A sequence-batcher control input (START/END/READY) as 0/1; 0 when absent."""
    arr = get(request, name)
    return 0 if arr is None or arr.size == 0 else int(np.asarray(arr).reshape(-1)[0])


def correlation_id(request: Any) -> int:
    """The request's correlation id (CORRID control input, else `request.correlation_id()`)."""
    arr = get(request, "CORRID")
    if arr is not None and arr.size:
        return int(np.asarray(arr).reshape(-1)[0])
    cid = request.correlation_id()
    return int(cid) if isinstance(cid, (int, np.integer)) else 0


def is_null_request(request: Any) -> bool:
    """True for the sequence batcher's filler requests (READY 0, correlation id 0)."""
    ready = get(request, "READY")
    if ready is not None and ready.size and int(np.asarray(ready).reshape(-1)[0]) == 0:
        return True
    return correlation_id(request) == 0


def ok(outputs: dict[str, np.ndarray]) -> Any:
    """A response carrying `outputs`."""
    utils = pb()
    return utils.InferenceResponse(
        output_tensors=[utils.Tensor(k, np.ascontiguousarray(v)) for k, v in outputs.items()])


def error(message: str) -> Any:
    """A response carrying an INVALID_ARG error with `message`."""
    utils = pb()
    return utils.InferenceResponse(error=utils.TritonError(message, utils.TritonError.INVALID_ARG))


def send_final(sender: Any, response: Any = None) -> None:
    """Send `response` (or nothing) with the FINAL flag on a decoupled response sender."""
    flags = pb().TRITONSERVER_RESPONSE_COMPLETE_FINAL
    if response is None:
        sender.send(flags=flags)
    else:
        sender.send(response, flags=flags)


def one_line(exc: BaseException) -> str:
    """A one-line message for an unexpected exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def serve_batch(requests: list, read: Callable[[Any], Any], compute: Callable[[list], list], label: str) -> list:
    """Responses of a stateless batch model: `read(request)` parses a request (an InputError is its own
    error response); `compute` runs once on all good ones and gives each its outputs; an exception in it
    fails this batch only."""
    responses: list = [None] * len(requests)
    batch: list[tuple[int, Any]] = []
    for i, request in enumerate(requests):
        try:
            batch.append((i, read(request)))
        except InputError as exc:
            responses[i] = error(str(exc))
    if not batch:
        return responses
    try:
        for (i, _), outputs in zip(batch, compute([item for _, item in batch]), strict=True):
            responses[i] = ok(outputs)
    except Exception as exc:  # never let one bad batch kill the stub
        for i, _ in batch:
            responses[i] = error(f"{label} failed: {one_line(exc)}")
    return responses


def serve_token_rows(requests: list, name: str, vocab_size: int, length: int,
                     compute: Callable[[np.ndarray], np.ndarray], output: str, label: str) -> list:
    """Responses of a stateless row model (`serve_batch`): ``compute`` runs once on all good requests'
    rows, split back as `output` plus BATCH_SIZE."""
    def run(batch: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        out, rows = compute(np.concatenate(batch)), sum(t.shape[0] for t in batch)
        parts = np.split(out, np.cumsum([t.shape[0] for t in batch])[:-1])
        return [{output: part, "BATCH_SIZE": np.full((part.shape[0], 1), rows, np.int32)} for part in parts]
    return serve_batch(requests, lambda r: check_token_rows(require(r, name), name, vocab_size, length), run, label)
