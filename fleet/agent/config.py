"""The rig agent's configuration file (TOML). Pure: no Django. docs/rig.example.toml is the
commented reference and is parsed by the tests, so it cannot drift from this code."""
from __future__ import annotations

import ipaddress
import ssl
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fleet.agent.rehearsal import GPU_COUNT as REHEARSAL_GPU_COUNT
from fleet.local_worker import MIN_BATCH_SIZE, LaunchOptions

SPLIT_MODES = {"none", "layer", "row", "tensor"}
TELEMETRY_SOURCES = {"nvml", "rehearsal"}  # rehearsal: NVML faked (fleet/agent/rehearsal.py)
ROPE_SCALINGS = {"none", "linear", "yarn"}


class AgentConfigError(ValueError):
    """The file is not a valid rig configuration; the message says where."""


@dataclass(frozen=True)
class WorkerConfig:
    name: str
    model_id: str
    port: int
    model_path: str | None = None  # None: the bundled SmolLM2 (CPU demo)
    gpus: tuple[int, ...] = ()  # CUDA_VISIBLE_DEVICES; () = CPU only
    pool: str = "production"
    context: int = 8192
    slots: int = 1
    lane_tokens: int = 0  # a lane worker: kept for prompts of at most this many tokens (0: any prompt)
    options: LaunchOptions = field(default_factory=LaunchOptions)

    def launch_summary(self) -> dict[str, Any]:
        """What the control plane stores about how this worker was launched."""
        summary: dict[str, Any] = {"context": self.context, "slots": self.slots, **self.options.summary()}
        if self.model_path:
            summary["model_path"] = self.model_path
        return summary


@dataclass(frozen=True)
class AgentConfig:
    control_plane_url: str
    token: str
    rig_name: str
    address: str
    heartbeat_s: float = 5.0
    ca_file: str | None = None  # a private CA's certificate(s), PEM, trusted for the control plane
    llama_server: str | None = None
    log_dir: str | None = None
    key_dir: str | None = None  # the workers' key files (0600); None: a private temporary directory
    slot_files_gb: float = 16.0  # each worker's slot files (students' saved prompts) are kept under this
    workers: tuple[WorkerConfig, ...] = field(default_factory=tuple)
    # "nvml": the GPUs as NVML reads them. "rehearsal": a rehearsal rig of CPU workers, its 8
    # GTX 1070s faked at NVML's boundary (fleet/agent/rehearsal.py); its heartbeats say so.
    telemetry: str = "nvml"

    @property
    def rehearsal(self) -> bool:
        return self.telemetry == "rehearsal"


def _get(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
    if key not in table:
        if default is ...:
            raise AgentConfigError(f"{where}: `{key}` is required")
        return default
    value = table[key]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise AgentConfigError(f"{where}: `{key}` has the wrong type ({type(value).__name__})")
    return value


def _worker(table: dict[str, Any], index: int) -> WorkerConfig:
    where = f"[[workers]] #{index + 1}"
    name = _get(table, "name", str, where)
    where = f"worker {name!r}"
    gpus = tuple(_get(table, "gpus", list, where, []))
    if not all(isinstance(g, int) and g >= 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise AgentConfigError(f"{where}: `gpus` must be distinct GPU indices, e.g. [0, 1, 2, 3]")
    split_mode = _get(table, "split_mode", str, where, None)
    if split_mode is not None and split_mode not in SPLIT_MODES:
        raise AgentConfigError(f"{where}: `split_mode` must be one of {sorted(SPLIT_MODES)}")
    rope_scaling = _get(table, "rope_scaling", str, where, None)
    if rope_scaling is not None and rope_scaling not in ROPE_SCALINGS:
        raise AgentConfigError(f"{where}: `rope_scaling` must be one of {sorted(ROPE_SCALINGS)}")
    tensor_split = tuple(float(x) for x in _get(table, "tensor_split", list, where, []))
    if tensor_split and gpus and len(tensor_split) != len(gpus):
        raise AgentConfigError(f"{where}: `tensor_split` needs one share per GPU in `gpus`")
    port = _get(table, "port", int, where)
    if not 1 <= port <= 65535:
        raise AgentConfigError(f"{where}: `port` must be 1-65535")
    slots = _get(table, "slots", int, where, 1)
    context = _get(table, "context", int, where, 8192)
    if slots < 1 or context < 256:
        raise AgentConfigError(f"{where}: `slots` must be >= 1 and `context` >= 256")
    lane_tokens = _get(table, "lane_tokens", int, where, 0)
    if lane_tokens < 0:
        raise AgentConfigError(f"{where}: `lane_tokens` must be 0 (any prompt) or more")
    threads = _get(table, "threads", int, where, None)
    if threads is not None and threads < 1:
        raise AgentConfigError(f"{where}: `threads` must be >= 1")
    batch_size = _get(table, "batch_size", int, where, None)
    if batch_size is not None and batch_size < MIN_BATCH_SIZE:
        raise AgentConfigError(f"{where}: `batch_size` must be >= {MIN_BATCH_SIZE}")
    return WorkerConfig(
        name=name,
        model_id=_get(table, "model_id", str, where),
        port=port,
        model_path=_get(table, "model_path", str, where, None),
        gpus=gpus,
        pool=_get(table, "pool", str, where, "production"),
        context=context,
        slots=slots,
        lane_tokens=lane_tokens,
        options=LaunchOptions(
            threads=threads,
            batch_size=batch_size,
            n_gpu_layers=_get(table, "n_gpu_layers", int, where, None),
            split_mode=split_mode,
            tensor_split=tensor_split,
            main_gpu=_get(table, "main_gpu", int, where, None),
            rope_scaling=rope_scaling,
            rope_scale=_get(table, "rope_scale", (int, float), where, None),
            yarn_orig_ctx=_get(table, "yarn_orig_ctx", int, where, None),
            draft_model=_get(table, "draft_model", str, where, None),
            spec_type=_get(table, "spec_type", str, where, None),
            extra_args=tuple(str(a) for a in _get(table, "extra_args", list, where, [])),
        ),
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_control_plane_url(url: str) -> None:
    """https://, or http:// to this machine only: the rig token must never cross a network in
    clear (a NetBird address is a network too)."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and _loopback(parts.hostname):
        return
    if parts.scheme == "http":
        raise AgentConfigError(f"[control_plane]: `url` {url!r} is plain http:// to another machine, which would "
                               "send the rig token in clear; use https:// (a private CA: set `ca_file`)")
    raise AgentConfigError("[control_plane]: `url` must start with https:// (or http:// on loopback)")


def parse_agent_config(text: str, *, base_dir: Path | None = None) -> AgentConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AgentConfigError(f"not valid TOML: {exc}") from None
    control = _get(data, "control_plane", dict, "file")
    rig = _get(data, "rig", dict, "file")
    token = _get(control, "token", str, "[control_plane]", None)
    token_file = _get(control, "token_file", str, "[control_plane]", None)
    if token is None and token_file is None:
        raise AgentConfigError("[control_plane]: set `token_file` (preferred) or `token`")
    if token is None:
        path = Path(token_file)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise AgentConfigError(f"[control_plane]: token_file {path}: {exc.strerror}") from None
    url = _get(control, "url", str, "[control_plane]").rstrip("/")
    check_control_plane_url(url)
    ca_file = _get(control, "ca_file", str, "[control_plane]", None)
    if ca_file is not None:
        ca_path = Path(ca_file)
        if not ca_path.is_absolute() and base_dir is not None:
            ca_path = base_dir / ca_path
        try:
            ssl.create_default_context(cafile=str(ca_path))
        except (OSError, ssl.SSLError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise AgentConfigError(f"[control_plane]: ca_file {ca_path}: {reason}") from None
        ca_file = str(ca_path)
    workers = tuple(_worker(t, i) for i, t in enumerate(_get(data, "workers", list, "file", [])))
    names = [w.name for w in workers]
    if len(set(names)) != len(names):
        raise AgentConfigError("workers: names must be unique")
    ports = [w.port for w in workers]
    if len(set(ports)) != len(ports):
        raise AgentConfigError("workers: two workers use the same port")
    used = [g for w in workers for g in w.gpus]
    if len(set(used)) != len(used):
        raise AgentConfigError("workers: a GPU is given to two workers")
    telemetry = _get(rig, "telemetry", str, "[rig]", "nvml")
    if telemetry not in TELEMETRY_SOURCES:
        raise AgentConfigError(f"[rig]: `telemetry` must be one of {sorted(TELEMETRY_SOURCES)}")
    if telemetry == "rehearsal":
        beyond = sorted(g for g in used if g >= REHEARSAL_GPU_COUNT)
        if beyond:
            raise AgentConfigError(f"workers: GPU(s) {beyond} do not exist on a rehearsal rig "
                                   f"({REHEARSAL_GPU_COUNT} GPUs, 0-{REHEARSAL_GPU_COUNT - 1})")
    llama = data.get("llama_server", {})
    slot_files_gb = float(_get(llama, "slot_files_gb", (int, float), "[llama_server]", 16.0))
    if slot_files_gb <= 0:
        raise AgentConfigError("[llama_server]: `slot_files_gb` must be more than 0")
    return AgentConfig(
        control_plane_url=url,
        token=token,
        rig_name=_get(rig, "name", str, "[rig]"),
        address=_get(rig, "address", str, "[rig]"),
        heartbeat_s=float(_get(rig, "heartbeat_s", (int, float), "[rig]", 5.0)),
        ca_file=ca_file,
        llama_server=_get(llama, "binary", str, "[llama_server]", None),
        log_dir=_get(llama, "log_dir", str, "[llama_server]", None),
        key_dir=_get(llama, "key_dir", str, "[llama_server]", None),
        slot_files_gb=slot_files_gb,
        workers=workers,
        telemetry=telemetry,
    )


def load_agent_config(path: Path) -> AgentConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AgentConfigError(f"{path}: {exc.strerror}") from None
    return parse_agent_config(text, base_dir=path.parent)
