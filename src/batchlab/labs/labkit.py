"""What a lab imports: its server (`lab_server`), a private model repository (`workspace`), and
`needs` / `attempt` / `ready`, which skip a cell while the question it depends on is not right."""

from __future__ import annotations

import atexit
import builtins
import importlib.util
import inspect
import os
import re
import shutil
import tempfile
import textwrap
import types
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from batchlab.batching.request import GenerationRequest
from batchlab.config_pbtxt import edit_config, parse_config, stage_model, to_text
from batchlab.labs._core import MARK_BAD, MARK_TODO, Raised, current_lab, last_result
from batchlab.load.stats import ModelStats, read_stats
from batchlab.paths import MODEL_REPOSITORY
from batchlab.server import ExternalServer, ModelLoadError, ServerError, TritonServer, connect, poll

_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_SKIP = "这一格要用到第 {q} 题的结果"


def needs(*questions: int) -> bool:
    """True when these questions' checks (of the lab checked last) passed; else say which to fix first."""
    lab = current_lab()
    for q in questions:
        result = last_result(lab, q) if lab is not None else None
        if result is None:
            print(f"{MARK_TODO} {_SKIP.format(q=q)}：先运行第 {q} 题的检查格，这一格先跳过。")
        elif result.pending:
            print(_not_done(q))
        elif not result.passed:
            print(f"{MARK_BAD} {_SKIP.format(q=q)}，先把第 {q} 题改对（它的检查格还没有全对），这一格先跳过。")
        else:
            continue
        return False
    return True


def _not_done(q: int) -> str:
    return f"{MARK_TODO} {_SKIP.format(q=q)}：第 {q} 题还没完成，这一格先跳过。完成后从第 {q} 题那一格重新往下运行。"


def attempt(question: int, fn: Callable[..., Any], *args: Any, requires: Sequence[int] | None = None,
            **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` once the questions `requires` (default: `question`) passed their checks;
    otherwise, or when `fn` raises, print which question to fix and return None."""
    if not needs(*(requires if requires is not None else (question,))):
        return None
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        m = re.search(r"第 (\d+) 题", str(exc))
        print(_not_done(int(m.group(1)) if m else question))
    except Exception as exc:  # the learner's answer raised on this cell's inputs: say so, no traceback
        what = Raised(type(exc).__name__, str(exc)).short()
        print(f"{MARK_BAD} 第 {question} 题的函数在这一格里抛出了 {what}：先把第 {question} 题改对，这一格先跳过。")
    return None


def ready(question: int, *values: Any) -> bool:
    """True when question `question` passed its check and every value is set; otherwise print why."""
    if not needs(question):
        return False
    if any(v is None or v is Ellipsis for v in values):
        print(_not_done(question))
        return False
    return True


_LAB_SERVER: list[TritonServer] = []


def lab_server(models: Sequence[str], **kwargs: Any) -> TritonServer | ExternalServer:
    """The `TRITON_URL` server or an embedded one loading only `models` (see `server.connect`), said
    in Chinese; a re-run stops the embedded server this function started before."""
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
        if isinstance(thing, ExternalServer):
            print(f"TRITON_URL 指向的服务器 {thing.http_url} 不是本实验启动的：留着它继续运行。")
        elif isinstance(thing, Workspace):
            thing.close()
            print(f"私有模型仓库 {thing.dir} 的服务器已停止，文件夹已删除。")
        elif thing is not None:
            thing.stop()
            print(f"本实验启动的 Triton 服务器已停止（{'仍在运行！' if getattr(thing, 'running', False) else '没有留下进程'}）。")


#: The functions a lab may put into its copy of `lm_stream` (`Workspace.install`): hook -> the file in
#: ``1/`` its source goes to. `admit(waiting, active, max_active, kv_token_budget)` chooses which waiting
#: requests may start (the scheduler then gives each its blocks, stopping at the first that does not
#: fit); `prefill_chunks(remaining, n_decoding, max_num_tokens)` chunked prefill's split (the model
#: runs it when its config has step_policy chunked); `accept(draft_tokens, target_argmax)` speculative
#: decoding's acceptance rule (run when its config sets a speculative_method).
LM_HOOKS = {"admit": "policy.py", "prefill_chunks": "chunks.py", "accept": "accept.py"}


class HookError(ValueError):
    """A lab function that does not run on its own in the model process (said in Chinese)."""


def waiting_request(i: int, prompt: int, max_tokens: int, generated: int = 0) -> GenerationRequest:
    """A scheduler `GenerationRequest` as `admit` sees it: `prompt` tokens, `generated` so far (its KV:
    all but the last sampled token)."""
    return GenerationRequest(i, [1] * (prompt + generated), max_tokens, prompt_tokens=prompt, generated=generated,
                             computed=prompt + generated - 1 if generated else 0)


def _hook_samples(hook: str) -> tuple:
    """Arguments like those the model passes `hook` (a first run before the server does)."""
    if hook == "admit":
        return ([waiting_request(i, 16, 32) for i in range(3)], [waiting_request(9, 16, 32, 4)], 8, 4096)
    if hook == "accept":
        return ([5, 6, 7], [5, 6, 9, 4])
    return ([100, 5], 4, 32)


def outside_names(hook: str, message: str) -> str:
    """Why `hook` raised NameError `message` in the model, and what to change (Chinese)."""
    m = re.search(r"name '(\w+)' is not defined", message)
    name = f" {m.group(1)}" if m else ""
    return (f"{hook} 用到了函数外面的名字{name}（{message}）：它会被原样拷进模型进程里单独运行，那里没有 notebook 里的"
            f"变量、import 和别的函数。把要用的 import 写进函数体里（例如 import math），或者只用它的参数")


def isolated(fn: Any) -> Any:
    """`fn` with none of the notebook's globals (only builtins and its own name), as the model process
    runs its copied source: a name from outside it raises NameError. Not a Python function (the
    grader's stand-in of one): `fn` itself."""
    if not isinstance(fn, types.FunctionType):
        return fn
    module = {"__builtins__": builtins, "__name__": f"lab_{fn.__name__}"}
    alone = types.FunctionType(fn.__code__, module, fn.__name__, fn.__defaults__, fn.__closure__)
    alone.__kwdefaults__ = fn.__kwdefaults__
    module[fn.__name__] = alone
    return alone

_LIVE: "weakref.WeakSet[Workspace]" = weakref.WeakSet()
_COUNTERS = ("success", "success_ns", "inference_count", "execution_count")
_PREFIX = "batchlab-lab-"


@atexit.register
def _close_all() -> None:
    for ws in list(_LIVE):
        ws.close()


def _sweep_stale(base: Path, prefix: str) -> None:
    """Delete workspace folders left behind by kernels that died (their owner pid is gone)."""
    for d in base.glob(prefix + "*"):
        try:
            os.kill(int((d / "owner.pid").read_text()), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            pass


def _delta(now: ModelStats, start: ModelStats) -> dict[str, Any]:
    """A history segment's `_COUNTERS` and its ``stats`` (the `ModelStats` difference) from `start` to `now`."""
    d = now - start if now.execution_count >= start.execution_count else now  # counters that went down restarted
    return {**dict(zip(_COUNTERS, (*d.phases["success"], d.inference_count, d.execution_count))), "stats": d}


class Workspace:
    """A private model repository (copies of course models) and the embedded server on it."""

    def __init__(self, models: Iterable[str], root: str | os.PathLike[str] | None = None) -> None:
        _sweep_stale(Path(root) if root is not None else Path(tempfile.gettempdir()), _PREFIX)
        self.dir = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=root))
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

    def _model_dir(self, model: str) -> Path:
        if not isinstance(model, str) or not _NAME.match(model):
            raise ValueError(f"bad model name {model!r}")
        return self.repo / model

    def add(self, model: str, as_name: str | None = None) -> Path:
        """Copy course model `model` into the workspace (as `as_name`, renaming it in its config)."""
        stage_model(self.repo, as_name or model, None, model, repo=MODEL_REPOSITORY)
        return self._model_dir(as_name or model)

    @property
    def models(self) -> list[str]:
        """Model folders in the workspace."""
        return sorted(p.parent.name for p in self.repo.glob("*/config.pbtxt"))

    def _config_path(self, model: str) -> Path:
        path = self._model_dir(model) / "config.pbtxt"
        if not path.is_file():
            raise ValueError(f"model {model!r} is not in this workspace (has {', '.join(self.models)})")
        return path

    def read_config(self, model: str) -> str:
        """The current config.pbtxt text of `model`."""
        return self._config_path(model).read_text(encoding="utf-8")

    def write_config(self, model: str, config: Any) -> Path:
        """Replace `model`'s config.pbtxt by `config` (text, or a `ModelConfig`); text Triton
        cannot parse raises ConfigError naming the line and column."""
        if isinstance(config, str):
            parse_config(config)
            text = config
        elif hasattr(config, "DESCRIPTOR") and config.DESCRIPTOR.full_name == "inference.ModelConfig":
            text = to_text(config)
        else:
            raise ValueError(f"config must be config text (a str) or a ModelConfig, got {type(config).__name__}")
        path = self._config_path(model)
        path.write_text(text, encoding="utf-8")
        return path

    def set_parameters(self, model: str, params: Mapping[str, Any]) -> Path:
        """Set `model`'s config `parameters` (key -> value, each a string_value); the rest stays."""
        edits = {"parameters": {k: f'string_value: "{v}"' for k, v in params.items()}}
        return self.write_config(model, edit_config(self.read_config(model), edits))

    def start(self, models: Sequence[str] | None = None, **kwargs: Any) -> TritonServer:
        """Start an embedded server on the workspace (explicit control; loads `models`, default all)."""
        if self.server is not None and self.server.running:
            return self.server
        load = list(models) if models is not None else self.models
        self.server = connect(self.repo, private=True, model_control="explicit", models=load, **kwargs).start()
        for model in load:
            self._segment(model, open_new=True)
        return self.server

    def reload(self, model: str, timeout: float = 60.0) -> None:
        """Load `model` again from its files and wait until it is ready; ModelLoadError when Triton refuses it."""
        if self.server is None or not self.server.running:
            raise ServerError("the workspace's server is not running: call start() first")
        client = self.server.http_client()
        self._segment(model, open_new=False)
        try:
            client.load_model(model)
        except Exception as exc:  # tritonclient's InferenceServerException
            text = str(exc).strip().splitlines()
            raise ModelLoadError(f"Triton 拒绝加载（或重新加载）{model!r}：{text[0] if text else exc}") from None
        if not poll(lambda: client.is_model_ready(model), timeout, interval=0.05):
            raise ServerError(f"model {model!r} not ready {timeout:.0f} s after reload")
        self._segment(model, open_new=True)

    def _stats(self, model: str) -> ModelStats | None:
        try:
            return read_stats(self.server.http_client(), model)
        except Exception:  # model not loaded (yet), or the server is gone
            return None

    def _segment(self, model: str, open_new: bool) -> None:
        """Close `model`'s open history segment at its statistics now; with `open_new`, open the next."""
        now = self._stats(model)
        old = self._open.pop(model, None)
        if old is not None and now is not None:
            self._segments.setdefault(model, []).append({**old[0], **_delta(now, old[1])})
        if open_new and now is not None:
            try:
                db = parse_config(self.read_config(model)).dynamic_batching
                cfg = {"delay_us": int(db.max_queue_delay_microseconds), "preferred": [int(b) for b in db.preferred_batch_size]}
            except ValueError:
                cfg = {}
            self._open[model] = (cfg, now)

    def history(self, model: str) -> list[dict[str, Any]]:
        """One entry per configuration `model` ran between two `reload`s (the last up to now): its
        ``delay_us`` and ``preferred``, how much each of `_COUNTERS` grew meanwhile and ``stats``, the
        server's statistics over the segment (a `ModelStats` difference: its batch sizes and times)."""
        out = [dict(s) for s in self._segments.get(model, [])]
        if model in self._open and (now := self._stats(model)) is not None:
            out.append({**self._open[model][0], **_delta(now, self._open[model][1])})
        return out

    def install(self, model: str, hook: str, fn: Callable[..., Any]) -> Path:
        """Make workspace model `model` (a copy of `lm_stream`) run the lab's self-contained function
        `fn` as `hook` (see `LM_HOOKS`; its source is copied to that file in ``1/``); then reload it.
        The copied file is run once here as the model will run it: HookError (in Chinese) when it
        fails, e.g. on a name from the notebook (the file is then removed)."""
        if hook not in LM_HOOKS:
            raise ValueError(f"unknown hook {hook!r}: one of {', '.join(LM_HOOKS)}")
        if not callable(fn) or getattr(fn, "__name__", "") == "<lambda>":
            raise ValueError(f"{hook} must be a function defined with def (its source is copied into the model)")
        try:
            src = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError) as exc:
            raise ValueError(f"cannot read the source of {fn!r}: {exc}") from None
        if fn.__name__ != hook:
            src += f"\n\n{hook} = {fn.__name__}\n"
        folder = self._model_dir(model) / "1"
        if not folder.is_dir():
            raise ValueError(f"model {model!r} has no version folder 1/ in this workspace")
        path = folder / LM_HOOKS[hook]
        path.write_text(f'"""The lab\'s `{hook}`, copied by labkit.Workspace.install."""\n\n' + src, encoding="utf-8")
        try:
            _try_hook(path, hook)
        except HookError:
            path.unlink()
            raise
        (folder / "model.py").write_text(_LAB_MODEL, encoding="utf-8")
        return path

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


_LAB_MODEL = '''"""`lm_stream` running the lab's functions (written by labkit.Workspace.install), each when
its file is here: `admit` from policy.py (who may start, in which order), `prefill_chunks` from
chunks.py (chunked prefill's split), `accept` from accept.py (speculative decoding's acceptance rule)."""

import importlib.util
import os

from batchlab.models.lm_stream import TritonPythonModel as _LMStream

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(file, name):
    path = os.path.join(_HERE, file)
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location("lab_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


_admit = _load("policy.py", "admit")
_chunks = _load("chunks.py", "prefill_chunks")
_accept = _load("accept.py", "accept")


class LabAdmission:
    """The configured admission policy (how many blocks a request holds), the lab's `admit` choosing
    which waiting requests may start."""

    def __init__(self, base, max_active, kv_token_budget):
        self.base, self.max_active, self.kv_token_budget = base, max_active, kv_token_budget

    def kv_tokens(self, request, n_new):
        return self.base.kv_tokens(request, n_new)

    def select(self, waiting, running):
        return list(_admit(list(waiting), list(running), self.max_active, self.kv_token_budget))


class TritonPythonModel(_LMStream):
    def initialize(self, args):
        super().initialize(args)
        scheduler = self.batcher.scheduler
        if _admit is not None:
            pool = scheduler.blocks.num_blocks * scheduler.blocks.block_size
            scheduler.admission = LabAdmission(scheduler.admission, scheduler.max_active, pool)
        if _chunks is not None:
            scheduler.prefill_split = _chunks  # called with a list; its answer is read as ints
        if _accept is not None:
            self.batcher.accept = _accept  # called with two lists (`lm.generation.verify`)
'''


def _try_hook(path: Path, hook: str) -> None:
    """Load `path` as the lab model loads it and call its `hook` once on sample arguments."""
    spec = importlib.util.spec_from_file_location(f"lab_try_{hook}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        getattr(module, hook)(*_hook_samples(hook))
    except NameError as exc:
        raise HookError(outside_names(hook, str(exc))) from None
    except Exception as exc:  # the learner's code: said, not a traceback
        raise HookError(f"{hook} 拷进模型后试运行时抛出了 {Raised(type(exc).__name__, str(exc)).short()}：先把它改对") from None


_NAMED: dict[str, Workspace] = {}


def workspace(models: Iterable[str], name: str | None = None, **kwargs: Any) -> Workspace:
    """A private copy of course `models` in a fresh temporary folder (see `Workspace`); a workspace
    made earlier under the same `name` in this process is closed first."""
    old = _NAMED.pop(name, None) if name is not None else None
    if old is not None:
        old.close()
        print(f"（关闭了上一次的私有仓库 {old.dir}）")
    ws = Workspace(models, **kwargs)
    if name is not None:
        _NAMED[name] = ws
    return ws
