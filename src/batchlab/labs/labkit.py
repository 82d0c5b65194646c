"""Helpers the labs share: the lab's server, a private model repository, unfinished TODOs.

* `lab_server(models)` — the server a lab uses for the course's own models: the external one
  named by `TRITON_URL` (`make start`, an NGC container) or an embedded one that loads only
  `models`.
* `workspace(models)` — a private copy of some course models in a fresh temporary folder: the
  learner rewrites a `config.pbtxt` (or a policy file) there, `start()`s an embedded server on
  it and `reload()`s a model after each change. An external server's repository is not ours to
  write, so a workspace always runs its own embedded server, even with `TRITON_URL` set.
* `needs(n)`, `attempt(n, fn, ...)`, `ready(n, value)` — the guard of the cells after a TODO:
  while question n's check has not passed (not written, wrong, or not checked yet), or when its
  function raises, they print one Chinese sentence naming the question to fix and skip, instead of
  failing with a traceback; cells that do not depend on it still run.

Everything a lab starts is stopped by `stop()`/`close()` (and at interpreter exit).
"""

from __future__ import annotations

import atexit
import inspect
import os
import re
import shutil
import tempfile
import textwrap
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from batchlab.config_pbtxt import parse_config, stage_model, to_text
from batchlab.labs._core import MARK_BAD, MARK_TODO, current_lab, last_result
from batchlab.paths import MODEL_REPOSITORY
from batchlab.server import ExternalServer, ModelLoadError, ServerError, TritonServer, connect

_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


# --------------------------------------------------------------------------- unfinished TODOs


def not_done_message(question: int) -> str:
    """The line printed where a cell skips because question `question` is not written yet."""
    return f"{MARK_TODO} 这一格要用到第 {question} 题的结果：第 {question} 题还没完成，这一格先跳过。完成后从第 {question} 题那一格重新往下运行。"


def wrong_message(question: int) -> str:
    """The line printed where a cell skips because question `question`'s check did not pass."""
    return f"{MARK_BAD} 这一格要用到第 {question} 题的结果，先把第 {question} 题改对（它的检查格还没有全对），这一格先跳过。"


def unchecked_message(question: int) -> str:
    """The line printed where a cell skips because question `question`'s check has not run."""
    return f"{MARK_TODO} 这一格要用到第 {question} 题的结果：先运行第 {question} 题的检查格，这一格先跳过。"


def raised_message(question: int, exc: BaseException) -> str:
    """The line printed where the learner's function for `question` raised in a later cell."""
    first = str(exc).strip().splitlines()
    what = f"{type(exc).__name__}: {first[0] if first else ''}".rstrip(": ")
    return f"{MARK_BAD} 第 {question} 题的函数在这一格里抛出了 {what}：先把第 {question} 题改对，这一格先跳过。"


def needs(*questions: int) -> bool:
    """True when the checks of these questions (of the lab whose check ran last) passed in full;
    otherwise print one sentence naming the first question to fix, and return False.

    This is the one guard a lab's later cells use (`attempt` and `ready` call it), so a wrong or
    missing answer stops the cells that depend on it cleanly while the others still run.
    """
    lab = current_lab()
    for q in questions:
        result = last_result(lab, q) if lab is not None else None
        if result is None:
            print(unchecked_message(q))
            return False
        if result.pending:
            print(not_done_message(q))
            return False
        if not result.passed:
            print(wrong_message(q))
            return False
    return True


def attempt(question: int, fn: Callable[..., Any], *args: Any, requires: Sequence[int] | None = None,
            **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` once question `question` (whose answer `fn` is) passed its check;
    otherwise, or when `fn` raises, print one sentence saying which question to fix and return None.

    `requires`: the questions whose checks must have passed first, when not `question` itself (a
    cell that runs question 2's function *before* its check, on question 1's result: ``requires=(1,)``).
    """
    if not needs(*(requires if requires is not None else (question,))):
        return None
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        m = re.search(r"第 (\d+) 题", str(exc))
        print(not_done_message(int(m.group(1)) if m else question))
    except Exception as exc:  # the learner's answer raised on this cell's inputs: say so, no traceback
        print(raised_message(question, exc))
    return None


def ready(question: int, *values: Any) -> bool:
    """True when question `question` passed its check and every value is set; otherwise print why."""
    if not needs(question):
        return False
    if any(v is None or v is Ellipsis for v in values):
        print(not_done_message(question))
        return False
    return True


# --------------------------------------------------------------------------- servers


_LAB_SERVER: list[TritonServer] = []


def lab_server(models: Sequence[str], **kwargs: Any) -> TritonServer | ExternalServer:
    """Start (or reach) the server a lab uses for the course models, and say which it is.

    With `TRITON_URL` set, the shared server is used (it must serve `models`); otherwise an
    embedded server is started that loads only `models` (explicit model control). Running the
    cell again stops the server it started before, so a re-run never leaves a second one behind.
    """
    while _LAB_SERVER:
        _LAB_SERVER.pop().stop()
    server = connect(models=list(models), **kwargs).start()
    if isinstance(server, ExternalServer):
        print(f"使用 TRITON_URL 指向的服务器 {server.http_url}（不是本实验启动的，结束时也不会停掉它）")
        return server
    _LAB_SERVER.append(server)
    print(f"内置 Triton 服务器已启动：HTTP {server.http_url}，gRPC {server.grpc_url}，"
          f"metrics {server.metrics_url}；模型 {', '.join(server.models)}")
    return server


def stop(*things: Any) -> None:
    """Stop what a lab started (servers, workspaces) and say so; an external server is left alone."""
    for thing in things:
        if thing is None:
            continue
        if isinstance(thing, ExternalServer):
            print(f"TRITON_URL 指向的服务器 {thing.http_url} 不是本实验启动的：留着它继续运行。")
            continue
        if isinstance(thing, Workspace):
            thing.close()
            print(f"私有模型仓库 {thing.dir} 的服务器已停止，文件夹已删除。")
            continue
        thing.stop()
        print(f"本实验启动的 Triton 服务器已停止（{'仍在运行！' if getattr(thing, 'running', False) else '没有留下进程'}）。")


# --------------------------------------------------------------------------- private repositories

_LIVE: "weakref.WeakSet[Workspace]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for ws in list(_LIVE):
        ws.close()


def _sweep_stale(base: Path, prefix: str) -> None:
    """Delete workspace folders left behind by kernels that died (their owner pid is gone)."""
    for d in base.glob(prefix + "*"):
        try:
            pid = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            pass


class Workspace:
    """A private model repository (copies of course models) and the embedded server on it."""

    def __init__(self, models: Iterable[str], source: str | os.PathLike[str] | None = None,
                 root: str | os.PathLike[str] | None = None, prefix: str = "batchlab-lab-") -> None:
        self.source = Path(source) if source is not None else MODEL_REPOSITORY
        _sweep_stale(Path(root) if root is not None else Path(tempfile.gettempdir()), prefix)
        self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        (self.dir / "owner.pid").write_text(str(os.getpid()))
        self.repo = self.dir / "models"
        self.repo.mkdir()
        self.server: TritonServer | None = None
        self._segments: dict[str, list[dict[str, Any]]] = {}
        self._open: dict[str, tuple[dict[str, Any], dict[str, int]]] = {}
        _LIVE.add(self)
        try:
            for m in models:
                self.add(m)
        except BaseException:
            self.close()
            raise

    # -- files -----------------------------------------------------------------------------

    def _model_dir(self, model: str) -> Path:
        if not isinstance(model, str) or not _NAME.match(model):
            raise ValueError(f"bad model name {model!r}")
        return self.repo / model

    def add(self, model: str, as_name: str | None = None) -> Path:
        """Copy course model `model` into the workspace (as `as_name`, renaming it in its config)."""
        name = as_name or model
        stage_model(self.repo, name, None, model, repo=self.source)
        return self._model_dir(name)

    @property
    def models(self) -> list[str]:
        """Model folders in the workspace."""
        return sorted(p.parent.name for p in self.repo.glob("*/config.pbtxt"))

    def config_path(self, model: str) -> Path:
        """`<workspace>/models/<model>/config.pbtxt`."""
        path = self._model_dir(model) / "config.pbtxt"
        if not path.is_file():
            raise ValueError(f"model {model!r} is not in this workspace (has {', '.join(self.models)})")
        return path

    def read_config(self, model: str) -> str:
        """The current config.pbtxt text of `model`."""
        return self.config_path(model).read_text(encoding="utf-8")

    def write_config(self, model: str, config: Any, validate: bool = True) -> Path:
        """Replace `model`'s config.pbtxt by `config`: text, or a `ModelConfig` (such as
        `batchlab.config_pbtxt.edit_config` returns), written as text. With `validate`, refuse
        text Triton could not parse: the error names the line and column and says (in Chinese)
        where a misplaced field belongs.
        """
        if isinstance(config, str):
            text = config
            if validate:
                parse_config(text)
        elif hasattr(config, "DESCRIPTOR") and config.DESCRIPTOR.full_name == "inference.ModelConfig":
            text = to_text(config)
        else:
            raise ValueError(f"config must be config text (a str) or a ModelConfig, got {type(config).__name__}")
        path = self.config_path(model)
        path.write_text(text, encoding="utf-8")
        return path

    # -- server ----------------------------------------------------------------------------

    def start(self, models: Sequence[str] | None = None, **kwargs: Any) -> TritonServer:
        """Start an embedded server on the workspace (explicit control; loads `models`, default all)."""
        if self.server is not None and self.server.running:
            return self.server
        load = list(models) if models is not None else self.models
        self.server = TritonServer(self.repo, model_control="explicit", models=load, **kwargs).start()
        for model in load:
            self._open_segment(model)
        return self.server

    def reload(self, model: str, timeout: float = 60.0) -> None:
        """Load `model` again from its (changed) files and wait until it is ready.

        Raises `ModelLoadError` with the server's reason when the new config is refused.
        """
        if self.server is None or not self.server.running:
            raise ServerError("the workspace's server is not running: call start() first")
        client = self.server.http_client()
        self._close_segment(model)
        try:
            client.load_model(model)
        except Exception as exc:  # tritonclient's InferenceServerException
            text = str(exc).strip().splitlines()
            raise ModelLoadError(f"Triton refused to (re)load {model!r}: {text[0] if text else exc}") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if client.is_model_ready(model):
                self._open_segment(model)
                return
            time.sleep(0.05)
        raise ServerError(f"model {model!r} not ready {timeout:.0f} s after reload")

    # -- what the server recorded ----------------------------------------------------------

    def _counters(self, model: str) -> dict[str, int] | None:
        try:
            stats = self.server.http_client().get_inference_statistics(model)["model_stats"][0]
        except Exception:  # model not loaded (yet), or the server is gone
            return None
        inf = stats.get("inference_stats", {})
        return {"success": int(inf.get("success", {}).get("count", 0)),
                "success_ns": int(inf.get("success", {}).get("ns", 0)),
                "inference_count": int(stats.get("inference_count", 0)),
                "execution_count": int(stats.get("execution_count", 0))}

    def _open_segment(self, model: str) -> None:
        counters = self._counters(model)
        if counters is None:
            return
        try:
            db = parse_config(self.read_config(model)).dynamic_batching
            cfg = {"delay_us": int(db.max_queue_delay_microseconds), "preferred": [int(b) for b in db.preferred_batch_size]}
        except ValueError:
            cfg = {}
        self._open[model] = (cfg, counters)

    def _close_segment(self, model: str) -> None:
        if model not in self._open or self.server is None or not self.server.running:
            return
        cfg, start = self._open.pop(model)
        now = self._counters(model)
        if now is not None:
            seg = {k: now[k] - start[k] if now[k] >= start[k] else now[k] for k in now}
            self._segments.setdefault(model, []).append({**cfg, **seg})

    def history(self, model: str) -> list[dict[str, Any]]:
        """What the server's statistics recorded for `model`, one entry per configuration it ran
        between two `reload`s (the last one up to now): its ``delay_us`` and ``preferred`` batch
        sizes (dynamic_batching), and the ``success`` count and time (``success_ns``),
        ``inference_count`` and ``execution_count`` the server added while it was loaded."""
        out = [dict(s) for s in self._segments.get(model, [])]
        if model in self._open:
            cfg, start = self._open[model]
            now = self._counters(model)
            if now is not None:
                out.append({**cfg, **{k: now[k] - start[k] if now[k] >= start[k] else now[k] for k in now}})
        return out

    def install_admission(self, model: str, admit: Callable[..., Any]) -> Path:
        """Make workspace model `model` (a copy of `lm_stream`) schedule with the function `admit`.

        `admit(waiting, active, max_active, kv_token_budget) -> list[int]` must be self-contained
        (it runs inside the Triton model process, not in this notebook): its source is written to
        `<model>/1/policy.py`, and `<model>/1/model.py` becomes `lm_stream` with its admission
        policy replaced (the limits still come from the config's `parameters`). Reload the model
        afterwards.
        """
        if not callable(admit) or getattr(admit, "__name__", "") == "<lambda>":
            raise ValueError("admit must be a function defined with def (its source is copied into the model)")
        try:
            src = textwrap.dedent(inspect.getsource(admit))
        except (OSError, TypeError) as exc:
            raise ValueError(f"cannot read the source of {admit!r}: {exc}") from None
        if admit.__name__ != "admit":
            src += f"\n\nadmit = {admit.__name__}\n"
        folder = self._model_dir(model) / "1"
        if not folder.is_dir():
            raise ValueError(f"model {model!r} has no version folder 1/ in this workspace")
        (folder / "policy.py").write_text(
            '"""The admission policy written in the lab (copied here by batchlab.labs.labkit)."""\n\n' + src,
            encoding="utf-8")
        (folder / "model.py").write_text(_ADMISSION_MODEL, encoding="utf-8")
        return folder / "policy.py"

    def stop(self) -> None:
        """Stop the workspace's server (the files stay until `close`)."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def close(self) -> None:
        """Stop the server and delete the workspace folder."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        _LIVE.discard(self)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"server on {self.server.http_url}" if self.server is not None and self.server.running else "no server"
        return f"<Workspace {self.repo} models={self.models} {state}>"


_ADMISSION_MODEL = '''"""`lm_stream` with the lab's admission policy (written by batchlab.labs.labkit.Workspace.install_admission).

The scheduler, the streaming and the limits (`max_active`, `kv_token_budget` parameters) are the
course's `lm_stream`; only the decision "which waiting sequences join the batch now" comes from
`policy.py` next to this file.
"""

import importlib.util
import os

from batchlab.models.lm_stream import TritonPythonModel as _LMStream


def _load_admit():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy.py")
    spec = importlib.util.spec_from_file_location("lab_admission_policy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.admit


class LabAdmission:
    """Admission policy calling the lab's `admit(waiting, active, max_active, kv_token_budget)`."""

    def __init__(self, admit, max_active, kv_token_budget):
        self.admit_fn = admit
        self.max_active = max_active
        self.kv_token_budget = kv_token_budget

    def check(self, candidate):
        if candidate.reserved_tokens > self.kv_token_budget:
            raise ValueError(f"request needs {candidate.reserved_tokens} KV tokens (prompt + max_tokens), "
                             f"the budget is {self.kv_token_budget}")

    def admit(self, waiting, active):
        return list(self.admit_fn(list(waiting), list(active), self.max_active, self.kv_token_budget))


class TritonPythonModel(_LMStream):
    def initialize(self, args):
        super().initialize(args)
        limits = self.batcher.policy
        self.batcher.policy = LabAdmission(_load_admit(), limits.max_active, limits.kv_token_budget)
'''


_NAMED: dict[str, Workspace] = {}


def workspace(models: Iterable[str], name: str | None = None, **kwargs: Any) -> Workspace:
    """A private copy of course `models` in a fresh temporary folder (see `Workspace`).

    With `name` (e.g. "lab2"), a workspace made earlier under that name in this process is closed
    first (its server stopped, its folder deleted): re-running a lab's setup cell is safe.
    """
    if name is not None:
        old = _NAMED.pop(name, None)
        if old is not None:
            old.close()
            print(f"（关闭了上一次的私有仓库 {old.dir}）")
    ws = Workspace(models, **kwargs)
    if name is not None:
        _NAMED[name] = ws
    return ws
