"""Run one submission's execution as a confined process: a container (docker / podman, with
``--image``), bubblewrap (read-only system, the submission's folder the only writable place), or
``none`` (a plain subprocess, for the instructor's own notebooks). `pick` chooses, `run` runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import batchlab

SANDBOX_DIR = "/grading"
SANDBOX_KINDS = ("auto", "docker", "podman", "bwrap", "none")


class SandboxError(RuntimeError):
    """No sandbox of the requested kind can run here."""


@dataclass(frozen=True)
class Sandbox:
    """How to run a command confined to one folder."""

    kind: str
    image: str = ""
    memory_mb: int = 3072

    def argv(self, workdir: Path, command: Sequence[str]) -> list[str]:
        """The full command line running `command` (paths under SANDBOX_DIR) with `workdir` mounted there."""
        workdir = Path(workdir).resolve()
        if self.kind in ("docker", "podman"):
            return [self.kind, "run", "--rm", "--network", "none", f"--memory={self.memory_mb}m",
                    "--pids-limit=1024", "--shm-size=512m", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                    "-e", "HOME=/grading/home", "-v", f"{workdir}:{SANDBOX_DIR}", "-w", SANDBOX_DIR,
                    self.image, "python", *command]
        if self.kind == "bwrap":
            env = [x for k, v in self.env(workdir).items() for x in ("--setenv", k, v)]
            return [shutil.which("bwrap") or "bwrap", *bwrap_args(workdir), *env, sys.executable, *command]
        return [sys.executable, *[c.replace(SANDBOX_DIR, str(workdir)) for c in command]]

    def env(self, workdir: Path) -> dict[str, str]:
        """The environment of the confined process (nothing of the instructor's is passed on)."""
        home = SANDBOX_DIR if self.kind != "none" else str(Path(workdir).resolve())
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": f"{home}/home",
               "TMPDIR": "/tmp" if self.kind != "none" else f"{home}/tmp", "PYTHONNOUSERSITE": "1",
               "MPLBACKEND": "agg", "JUPYTER_PLATFORM_DIRS": "1"}
        if self.kind in ("bwrap", "none"):
            env["PYTHONPATH"] = str(source_dir())
        return env


def source_dir() -> Path:
    """The folder the running `batchlab` package is imported from (its parent)."""
    return Path(batchlab.__file__).resolve().parents[1]


def _pth_dirs() -> set[Path]:
    """Folders that .pth files of the environment put on sys.path (an editable install's source)."""
    out = set()
    for site in {p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages")}:
        for pth in Path(site).glob("*.pth"):
            for line in pth.read_text(encoding="utf-8", errors="replace").splitlines():
                line = line.strip()
                if line.startswith("/") and Path(line).is_dir():
                    out.add(Path(line).resolve())
    return out


def _python_dirs() -> list[Path]:
    dirs = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parents[1],
            source_dir(), *_pth_dirs()}
    return sorted(d for d in dirs if d.exists())


def bwrap_args(workdir: Path) -> list[str]:
    """bubblewrap's options for a sandbox whose only writable folder is `workdir` (at SANDBOX_DIR)."""
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    for system in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"):
        if Path(system).exists():
            args += ["--ro-bind", system, system]
    for d in _python_dirs():
        if not str(d).startswith(("/usr", "/bin", "/lib", "/etc")):
            args += ["--ro-bind", str(d), str(d)]
    args += ["--bind", str(Path(workdir).resolve()), SANDBOX_DIR, "--chdir", SANDBOX_DIR]
    return args


def _answers(exe: str, *args: str) -> bool:
    """True when `exe args` exits 0 (within 20 s)."""
    path = shutil.which(exe)
    try:
        return path is not None and subprocess.run([path, *args], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pick(kind: str = "auto", image: str = "", memory_mb: int = 3072) -> Sandbox:
    """The sandbox to use (see module docstring); raises SandboxError when `kind` cannot run here."""
    if kind not in SANDBOX_KINDS:
        raise SandboxError(f"unknown sandbox {kind!r} (choose from {', '.join(SANDBOX_KINDS)})")
    if kind in ("docker", "podman"):
        if not image:
            raise SandboxError(f"--sandbox {kind} needs --image (an image with the course installed)")
        if not _answers(kind, "info"):
            raise SandboxError(f"{kind} is not installed or its daemon does not answer")
        return Sandbox(kind, image, memory_mb)
    if kind == "auto" and image:
        for engine in ("docker", "podman"):
            if _answers(engine, "info"):
                return Sandbox(engine, image, memory_mb)
    if kind in ("auto", "bwrap"):
        if _answers("bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"):
            return Sandbox("bwrap", "", memory_mb)
        raise SandboxError("no sandbox: bubblewrap is missing or cannot create namespaces here (apt-get install "
                           "bubblewrap), and no container engine with --image; --sandbox none runs unconfined")
    return Sandbox("none", "", memory_mb)


def run(box: Sandbox, workdir: Path, command: Sequence[str], wall_s: float) -> tuple[int, str]:
    """Run `command` in `box` with `workdir` as its folder; (exit code, last lines of output).
    The process group is killed after `wall_s` seconds (exit code -9)."""
    (Path(workdir) / "home").mkdir(exist_ok=True)
    (Path(workdir) / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen(box.argv(workdir, command), env=box.env(workdir), cwd=str(workdir),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(wall_s, 1))
        code = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = -9
    return code, out.decode(errors="replace")[-2000:]
