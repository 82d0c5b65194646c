"""A class on one JupyterHub, for real: docs/classroom.md's jupyterhub_config.py and values.yaml.

The hub test runs the guide's `jupyterhub_config.py` (plus a dummy login, ports and an API token
appended) as root with three fresh local users, logs them in at once through the hub's REST
API, and has each run Chapter 5's server cell and a short measurement in their own kernel,
concurrently. Then each learner tries a neighbour's restricted APIs, and the hub is stopped:
no process of any learner may remain. Skipped where jupyterhub, configurable-http-proxy
(`make test` installs it under .node/) or root is missing.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest
import yaml
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from batchlab.server import SHM_LIMIT_BYTES, free_port

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "classroom.md"
Z2JH = Path(__file__).resolve().parent / "data" / "z2jh-4.4.0"


def _block(lang: str, first_line: str) -> str:
    """The fenced `lang` code block of the classroom guide whose first line starts with `first_line`."""
    for m in re.finditer(rf"```{lang}\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S):
        if m.group(1).startswith(first_line):
            return m.group(1)
    raise AssertionError(f"docs/classroom.md has no {lang} block starting with {first_line!r}")


# --------------------------------------------------------------------------- values.yaml (Kubernetes)


def _merge(base: dict, over: dict) -> dict:
    """Helm's merge of user values over the chart's defaults (maps merge, everything else replaces)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _bytes(quantity: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"([\d.]+)([KMG]i?)?", str(quantity))
    assert m, quantity
    return float(m.group(1)) * units.get(m.group(2) or "", 1)


def test_values_yaml_passes_the_charts_schema_and_gives_what_a_learner_needs() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    values = yaml.safe_load(_block("yaml", "# values.yaml"))
    chart = yaml.safe_load((Z2JH / "values.yaml").read_text())
    schema = json.loads((Z2JH / "values.schema.json").read_text())
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(_merge(chart, values))]
    assert errors == []
    broken = _merge(chart, {"singleuser": {"cpu": {"limt": 2}}})  # the schema does catch a typo
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))
    su = values["singleuser"]
    assert su["cpu"]["guarantee"] >= 1 and su["cpu"]["limit"] >= su["cpu"]["guarantee"]
    assert _bytes(su["memory"]["guarantee"]) >= 1.5e9 and _bytes(su["memory"]["limit"]) >= _bytes(su["memory"]["guarantee"])
    vols = {v["name"]: v for v in su["storage"]["extraVolumes"]}
    mount = next(m for m in su["storage"]["extraVolumeMounts"] if m["mountPath"] == "/dev/shm")
    shm = vols[mount["name"]]["emptyDir"]
    assert shm["medium"] == "Memory"
    # Room for the regions of a chapter's models, each up to the cap the server sets.
    assert _bytes(shm["sizeLimit"]) >= 8 * SHM_LIMIT_BYTES
    assert _bytes(shm["sizeLimit"]) < _bytes(su["memory"]["limit"])  # it counts against the pod's memory


def test_jupyterhub_config_compiles_and_names_the_spawner() -> None:
    code = _block("python", "# jupyterhub_config.py")
    compile(code, "jupyterhub_config.py", "exec")
    assert 'spawner_class = "localprocess"' in code and "jupyterhub-singleuser" in code


# --------------------------------------------------------------------------- the hub, three learners


def _chp() -> str | None:
    local = ROOT / ".node" / "node_modules" / ".bin" / "configurable-http-proxy"
    return str(local) if local.exists() else shutil.which("configurable-http-proxy")


def _skip_reason() -> str | None:
    try:
        import jupyterhub  # noqa: F401  (only checked for)
    except ImportError:
        return "jupyterhub is not installed (pip install -e '.[test]')"
    if _chp() is None:
        return "configurable-http-proxy is not installed (make test installs it under .node/)"
    if shutil.which("node") is None:
        return "node is not installed (configurable-http-proxy needs it)"
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        return "needs root and useradd to create three local learners (CI runs as root)"
    for d in _closed_dirs(_LEARNER_PATHS):
        try:
            os.getxattr(d, _ACL)
            return f"{d} is closed to other users and already has an ACL: open it to the learners by hand"
        except OSError:
            continue
    return None



_ACL = "system.posix_acl_access"


def _closed_dirs(paths: Sequence[Path]) -> list[Path]:
    """The folders on the way to `paths` that other users cannot enter (e.g. a pyenv under /root)."""
    out: list[Path] = []
    for path in paths:
        for d in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
            if d.is_dir() and not os.stat(d).st_mode & stat.S_IXOTH and d not in out:
                out.append(d)
    return out


@contextlib.contextmanager
def _traversable(dirs: Sequence[Path], uids: Sequence[int]) -> Iterator[None]:
    """Let the users `uids` pass through (only x, not list or read) each of `dirs`, then undo it.

    A POSIX access ACL (the xattr setfacl writes): owner, the named users with x, group, mask,
    others. The folder's mode is restored afterwards.
    """
    saved = []
    try:
        for d in dirs:
            mode = stat.S_IMODE(os.stat(d).st_mode)
            undefined = 0xFFFFFFFF
            group = (mode >> 3) & 7
            entries = [(0x01, (mode >> 6) & 7, undefined), *((0x02, 1, u) for u in sorted(uids)),
                       (0x04, group, undefined), (0x10, group | 1, undefined), (0x20, mode & 7, undefined)]
            os.setxattr(d, _ACL, struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))
            saved.append((d, mode))
        yield
    finally:
        for d, mode in saved:
            with contextlib.suppress(OSError):
                os.removexattr(d, _ACL)
            os.chmod(d, mode)

CHAPTER = ROOT / "notebooks" / "05_evaluation.ipynb"
_LEARNER_PATHS = [Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable), ROOT]
"""What a learner's processes must reach: the interpreter, the environment, the course."""


def _server_cell() -> str:
    """Chapter 5's cell that starts its server (the chapter's own code, as a learner runs it)."""
    nb = json.loads(CHAPTER.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "connect(" in src:
            return src
    raise AssertionError("chapter 5 has no server cell")


MEASURE = """
import json, os
from batchlab.load import RequestSpec, run_open_loop
from batchlab.models.requests import random_embed_inputs
rep = run_open_loop(server, "embed", RequestSpec(random_embed_inputs(1)), rate=40, duration_s=0.5, warmup_s=0.2, progress=False)
print(json.dumps({"uid": os.getuid(), "pid": server.pid, "http": server.http_url, "grpc": server.grpc_url,
                  "key": server.key, "shm": [str(p) for p in server.shm_regions()], "workdir": str(server.workdir),
                  "n_ok": rep.n_ok, "n_errors": rep.n_errors, "rps": rep.throughput_rps}))
"""

PROBE = """
import json, subprocess, numpy as np, tritonclient.grpc as g, tritonclient.http as h
from tritonclient.utils import InferenceServerException
def status(call):
    try:
        call()
        return "allowed"
    except InferenceServerException as exc:
        return str(exc.status())
    except OSError as exc:
        return type(exc).__name__
H, G = h.InferenceServerClient({http!r}), g.InferenceServerClient({grpc!r})
out = {{"http": {{}}, "grpc": {{}}}}
for name, c in (("http", H), ("grpc", G)):
    out[name]["register_shm"] = status(lambda: c.register_system_shared_memory("evil", "/" + {region!r}, 4096))
    out[name]["load"] = status(lambda: c.load_model("embed", config='{{"backend": "python"}}',
                                                    files={{"file:1/model.py": b"import os"}}))
    out[name]["unload"] = status(lambda: c.unload_model("embed"))
    out[name]["index"] = status(lambda: c.get_model_repository_index())
    out[name]["logging"] = status(lambda: c.update_log_settings({{"log_verbose_level": 1}}))
out["http"]["placeholder_key"] = status(lambda: H.get_model_repository_index(headers={{"x-batchlab-key": "(hidden)"}}))
out["environ"] = status(lambda: open("/proc/{pid}/environ").read())
out["read_shm"] = status(lambda: open("/dev/shm/" + {region!r}, "rb").read(1))
out["ready"] = H.is_model_ready("embed")
out["ps"] = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
print(json.dumps(out))
"""

STILL_SERVING = """
import numpy as np, tritonclient.grpc as g
from batchlab.models.requests import random_embed_inputs
c = server.grpc_client()
ins = []
for name, arr in random_embed_inputs(2).items():
    t = g.InferInput(name, list(arr.shape), "INT32"); t.set_data_from_numpy(arr); ins.append(t)
emb = c.infer("embed", ins).as_numpy("EMBEDDING")
print(emb.shape, c.is_model_ready("embed"), [m.name for m in c.get_model_repository_index().models if m.state == "READY"])
"""


def _api(base: str, token: str, method: str, path: str, body: object = None, timeout: float = 30) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


class Kernel:
    """One kernel of a learner's Jupyter server, driven over its websocket (Jupyter protocol 5.3)."""

    def __init__(self, base: str, user: str, token: str) -> None:
        self.base, self.user, self.token = base, user, token
        self.ws = None

    async def open(self) -> "Kernel":
        code, kernel = await asyncio.to_thread(_api, self.base, self.token, "POST", f"/user/{self.user}/api/kernels",
                                               {"name": "python3"})
        assert code == 201, (self.user, code, kernel)
        url = self.base.replace("http", "ws", 1) + f"/user/{self.user}/api/kernels/{kernel['id']}/channels"
        self.ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {self.token}"}))
        return self

    async def run(self, code: str, timeout: float = 120) -> str:
        """Execute `code`; return its stdout, or fail with the learner's error."""
        msg_id = uuid.uuid4().hex
        await self.ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": self.user,
                       "session": uuid.uuid4().hex, "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        out, error, reply, idle = [], None, None, False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            raw = await asyncio.wait_for(self.ws.read_message(), max(0.1, deadline - time.monotonic()))
            assert raw is not None, f"{self.user}: the kernel's websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}\n" + "\n".join(content["traceback"])
            elif kind == "execute_reply":
                reply = content["status"]
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        assert reply == "ok" and error is None, f"{self.user}: {error or reply}"
        return "".join(out)

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()


def _user_procs(uids: set[int]) -> list[psutil.Process]:
    procs = []
    for p in psutil.process_iter(["uids", "name"]):
        try:
            if p.info["uids"] and p.info["uids"].real in uids and p.status() != psutil.STATUS_ZOMBIE:
                procs.append(p)
        except psutil.Error:
            continue
    return procs


def _tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else "(no log)"


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_three_learners_on_one_hub(tmp_path_factory: pytest.TempPathFactory) -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("hub")
    tmp.chmod(0o700)
    tag = secrets.token_hex(3)
    users = [f"bl{tag}{i}" for i in (1, 2, 3)]
    created: list[str] = []
    hub = None
    port, api_token = free_port(), secrets.token_hex(32)
    base = f"http://127.0.0.1:{port}"
    log = tmp / "jupyterhub.log"
    stack = contextlib.ExitStack()
    try:
        for u in users:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", u], check=True, capture_output=True)
            created.append(u)
        uids = {pwd.getpwnam(u).pw_uid for u in users}
        stack.enter_context(_traversable(_closed_dirs(_LEARNER_PATHS), sorted(uids)))
        config = _block("python", "# jupyterhub_config.py") + f"""
# ---- appended by tests/test_jupyterhub.py: dummy login, private ports and files, an admin API token
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set(users)!r}
c.JupyterHub.bind_url = "{base}"
c.JupyterHub.hub_port = {free_port()}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.command = [{_chp()!r}]
c.ConfigurableHTTPProxy.pid_file = {str(tmp / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{tmp / 'hub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(tmp / "cookie_secret")!r}
c.JupyterHub.services = [{{"name": "class-admin", "api_token": {api_token!r}}}]
c.JupyterHub.load_roles = [{{"name": "class-admin", "services": ["class-admin"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]}}]
c.Spawner.environment["PYTHONPATH"] = {str(ROOT / "src")!r}  # this checkout's batchlab (CI: installed -e anyway)
"""
        (tmp / "jupyterhub_config.py").write_text(config)
        env = {**os.environ, "BATCHLAB_COURSE": str(ROOT), "BATCHLAB_VENV": sys.prefix,
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        with log.open("wb") as fh:
            hub = subprocess.Popen([str(Path(sys.executable).parent / "jupyterhub"), "-f", str(tmp / "jupyterhub_config.py")],
                                   cwd=tmp, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not _hub_up(port):
            assert hub.poll() is None, f"jupyterhub exited:\n{_tail(log)}"
            assert time.monotonic() < deadline, f"jupyterhub not up in 60 s:\n{_tail(log)}"
            time.sleep(0.3)

        # Three learners log in at once: accounts, servers and tokens through the REST API.
        for u in users:  # allowed_users puts them in the hub's database at startup
            assert _api(base, api_token, "GET", f"/hub/api/users/{u}")[0] == 200

        async def login(user: str) -> str:
            code, body = await asyncio.to_thread(_api, base, api_token, "POST", f"/hub/api/users/{user}/server")
            assert code in (201, 202), (user, code, body)
            while True:
                code, info = await asyncio.to_thread(_api, base, api_token, "GET", f"/hub/api/users/{user}")
                if info["servers"].get("", {}).get("ready"):
                    break
                assert hub.poll() is None and time.monotonic() < deadline + 120, f"{user} never ready:\n{_tail(log)}"
                await asyncio.sleep(0.5)
            code, tok = await asyncio.to_thread(_api, base, api_token, "POST", f"/hub/api/users/{user}/tokens",
                                                {"note": "test", "expires_in": 900,
                                                 "scopes": [f"access:servers!user={user}"]})
            assert code == 201, (user, code, tok)
            return tok["token"]

        async def learners() -> dict[str, object]:
            tokens = await asyncio.gather(*(login(u) for u in users))
            kernels = await asyncio.gather(*(Kernel(base, u, t).open() for u, t in zip(users, tokens)))
            try:
                # Each runs the chapter's server cell, then a short measurement: all three at once.
                await asyncio.gather(*(k.run(_server_cell(), timeout=150) for k in kernels))
                facts = [json.loads(out.strip().splitlines()[-1])
                         for out in await asyncio.gather(*(k.run(MEASURE) for k in kernels))]
                # Each tries their right-hand neighbour's restricted APIs, at once.
                probes = await asyncio.gather(*(
                    k.run(PROBE.format(http=n["http"], grpc=n["grpc"], region=Path(n["shm"][0]).name, pid=n["pid"]))
                    for k, n in zip(kernels, facts[1:] + facts[:1])))
                serving = await asyncio.gather(*(k.run(STILL_SERVING) for k in kernels))
                return {"facts": facts, "probes": [json.loads(p.strip().splitlines()[-1]) for p in probes],
                        "serving": serving}
            finally:
                for k in kernels:
                    k.close()

        result = asyncio.run(learners())
        facts, probes = result["facts"], result["probes"]

        # Each learner got their own tritonserver, running as that learner.
        assert len({f["pid"] for f in facts}) == 3 and {f["uid"] for f in facts} == uids
        for f in facts:
            proc = psutil.Process(f["pid"])
            assert proc.name() == "tritonserver" and proc.uids().real == f["uid"]
            assert f["n_ok"] > 0 and f["n_errors"] == 0, f
        # No learner reaches a neighbour's restricted APIs (HTTP 403, gRPC UNAVAILABLE), nor its key.
        for probe in probes:
            for api in ("register_shm", "load", "unload", "index", "logging"):
                assert probe["http"][api] == "403", (api, probe["http"])
                assert probe["grpc"][api] == "StatusCode.UNAVAILABLE", (api, probe["grpc"])
            assert probe["http"]["placeholder_key"] == "403"
            assert probe["environ"] == "PermissionError"
            assert probe["read_shm"] == "PermissionError"  # a neighbour cannot read the tensors in flight
            assert probe["ready"] is True
            assert all(f["key"] not in probe["ps"] for f in facts)
        # ... and every server kept serving its own learner.
        chapter_models = sorted(ast.literal_eval(re.search(r"models=(\[[^\]]*\])", _server_cell()).group(1)))
        for line in result["serving"]:
            assert line.strip() == f"(2, 256) True {chapter_models}", line
    finally:
        if hub is not None and hub.poll() is None:
            hub.send_signal(signal.SIGTERM)  # the hub stops every learner's server, then the proxy
            try:
                hub.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(hub.pid, signal.SIGKILL)
                hub.wait(timeout=10)
        leftover = []
        if created:
            uids = {pwd.getpwnam(u).pw_uid for u in created}
            deadline = time.monotonic() + 20
            while (leftover := _user_procs(uids)) and time.monotonic() < deadline:
                time.sleep(0.2)
            for p in leftover:  # do not leave them for the next test, but fail below
                with contextlib.suppress(psutil.Error):
                    p.kill()
            for u in created:
                subprocess.run(["userdel", "--remove", u], capture_output=True)
        stack.close()
    described = [f"{p.pid} {p.info['name']}" for p in leftover]
    assert described == [], f"learner processes left after the hub stopped: {described}"
    for f in facts:
        assert not Path(f["workdir"]).exists() and not any(Path(r).exists() for r in f["shm"])


def _hub_up(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        if s.connect_ex(("127.0.0.1", port)) != 0:
            return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/hub/api/", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
