"""The rig agents' API on the control plane (docs/agent-api.md). Rig tokens only: a student
key, a wrong token or none gets 401. DRF: declarative validation; low traffic, off the hot path."""
from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.gguf import GgufFacts
from fleet.models import Rig
from fleet.rig_jobs import MAX_RESULT_CHARS, job_report, jobs_to_deliver
from fleet.rigs import RigRefused, heartbeat_pace, rig_authenticate, rig_heartbeat, rig_register

# Bounds on what an agent may report (docs/agent-api.md). Generous for any rig a school could
# own; they stop nonsense (a 1-token context, a negative pid) and values the database's columns
# cannot hold (a 40,000 °C reading would overflow PostgreSQL's smallint into a 500).
WORKER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
MAX_SLOTS = 256
MIN_CONTEXT_PER_SLOT = 512  # below this no chat prompt with a system message fits
MAX_CONTEXT_PER_SLOT = 1_048_576
MAX_GPUS = 64
MAX_GPU_INDEX = MAX_GPUS - 1
MAX_WORKERS_PER_RIG = 64
MAX_GPU_MEMORY_MIB = 1_048_576  # 1 TiB per GPU
MAX_GPU_TEMPERATURE_C = 150
MAX_GPU_POWER_W = 5_000.0
MAX_CLOCK_MHZ = 20_000
MAX_PCIE_GEN = 16
MAX_PCIE_WIDTH = 64
MAX_UPTIME_S = 10 * 365 * 86_400.0
MAX_LAUNCH_JSON_CHARS = 4_096
MAX_GGUF_JSON_CHARS = 16_384  # a 200-layer model's per-layer sizes fit several times over


class RigAgent:
    """The authenticated principal of an agent request (not a Django user)."""

    is_authenticated = True

    def __init__(self, rig: Rig) -> None:
        self.rig = rig


class RigTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[RigAgent, Rig] | None:
        scheme, _, token = get_authorization_header(request).decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationFailed("Send the rig token as 'Authorization: Bearer ocsrig-…'.")
        rig = rig_authenticate(token.strip())
        if rig is None:
            raise AuthenticationFailed("Unknown or wrong rig token.")
        return RigAgent(rig), rig

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="ocs-rig-agent"'


class IsRigAgent(BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.auth, Rig)


class AgentView(APIView):
    authentication_classes = [RigTokenAuthentication]
    permission_classes = [IsRigAgent]


def _unique(items: list[Any], key: str, what: str, *, most: int) -> None:
    if len(items) > most:
        raise serializers.ValidationError(f"at most {most} {what}s")
    seen = [item[key] for item in items]
    if len(seen) != len(set(seen)):
        raise serializers.ValidationError(f"each {what} may appear only once")


class WorkerDeclaration(serializers.Serializer):
    name = serializers.RegexField(WORKER_NAME, max_length=100)
    model_id = serializers.CharField(max_length=200)
    port = serializers.IntegerField(min_value=1, max_value=65535)
    slots = serializers.IntegerField(min_value=1, max_value=MAX_SLOTS)
    context_per_slot = serializers.IntegerField(min_value=MIN_CONTEXT_PER_SLOT, max_value=MAX_CONTEXT_PER_SLOT,
                                                required=False)
    pool = serializers.SlugField(max_length=50, required=False)
    lane_tokens = serializers.IntegerField(min_value=0, max_value=MAX_CONTEXT_PER_SLOT, required=False)
    gpus = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=MAX_GPU_INDEX),
                                 max_length=MAX_GPUS, required=False)
    launch = serializers.DictField(required=False)
    gguf = serializers.DictField(required=False, allow_null=True,
                                 help_text="The model file's facts (fleet/gguf.py GgufFacts.as_dict()).")

    def validate_gpus(self, value: list[int]) -> list[int]:
        if len(value) != len(set(value)):
            raise serializers.ValidationError("each GPU index may appear only once")
        return value

    def validate_launch(self, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value)) > MAX_LAUNCH_JSON_CHARS:
            raise serializers.ValidationError(f"the launch summary must fit in {MAX_LAUNCH_JSON_CHARS} characters")
        for name in ("context", "slots"):
            if name in value and (isinstance(value[name], bool) or not isinstance(value[name], int)
                                  or value[name] < 1):
                raise serializers.ValidationError(f"`{name}` must be a positive integer")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The reported slots and context per slot must be those of the launch the same report
        describes (llama-server's --parallel and --ctx-size / --parallel)."""
        launch = attrs.get("launch") or {}
        if "slots" in launch and launch["slots"] != attrs["slots"]:
            raise serializers.ValidationError(
                f"slots ({attrs['slots']}) is not the launch's ({launch['slots']})")
        if "context" in launch and attrs.get("context_per_slot") is not None:
            expected = launch["context"] // attrs["slots"]
            if attrs["context_per_slot"] != expected:
                raise serializers.ValidationError(
                    f"context_per_slot ({attrs['context_per_slot']}) is not the launch's context "
                    f"{launch['context']} / {attrs['slots']} slots = {expected}")
        return attrs

    def validate_gguf(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if len(json.dumps(value)) > MAX_GGUF_JSON_CHARS:
            raise serializers.ValidationError(f"the GGUF facts must fit in {MAX_GGUF_JSON_CHARS} characters")
        try:
            return GgufFacts.from_dict(value).as_dict()
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class RegisterRequest(serializers.Serializer):
    agent_version = serializers.CharField(max_length=50)
    workers = WorkerDeclaration(many=True)

    def validate_workers(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        _unique(value, "name", "worker name", most=MAX_WORKERS_PER_RIG)
        ports = [w["port"] for w in value]
        if len(ports) != len(set(ports)):
            raise serializers.ValidationError("two workers cannot listen on one port")
        return value


class GpuReport(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=MAX_GPU_INDEX)
    name = serializers.CharField(max_length=100, allow_blank=True)
    uuid = serializers.CharField(max_length=100, allow_blank=True)
    memory_total_mib = serializers.IntegerField(min_value=0, max_value=MAX_GPU_MEMORY_MIB)
    memory_used_mib = serializers.IntegerField(min_value=0, max_value=MAX_GPU_MEMORY_MIB)
    utilization_pct = serializers.IntegerField(min_value=0, max_value=100, allow_null=True)
    temperature_c = serializers.IntegerField(min_value=0, max_value=MAX_GPU_TEMPERATURE_C, allow_null=True)
    power_w = serializers.FloatField(min_value=0, max_value=MAX_GPU_POWER_W, allow_null=True)
    sm_clock_mhz = serializers.IntegerField(min_value=0, max_value=MAX_CLOCK_MHZ, allow_null=True)
    mem_clock_mhz = serializers.IntegerField(min_value=0, max_value=MAX_CLOCK_MHZ, allow_null=True)
    pcie_gen = serializers.IntegerField(min_value=0, max_value=MAX_PCIE_GEN, allow_null=True)
    pcie_width = serializers.IntegerField(min_value=0, max_value=MAX_PCIE_WIDTH, allow_null=True)
    pcie_max_gen = serializers.IntegerField(min_value=0, max_value=MAX_PCIE_GEN, allow_null=True, required=False)
    pcie_max_width = serializers.IntegerField(min_value=0, max_value=MAX_PCIE_WIDTH, allow_null=True,
                                              required=False)
    sampled_at = serializers.FloatField(min_value=0, allow_null=True, required=False,
                                        help_text="The agent's clock when NVML was read, Unix seconds.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["memory_used_mib"] > attrs["memory_total_mib"]:
            raise serializers.ValidationError("memory_used_mib is more than memory_total_mib")
        return attrs


class WorkerReport(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    process_state = serializers.ChoiceField(choices=["stopped", "starting", "running", "backoff", "crashed"])
    pid = serializers.IntegerField(min_value=1, max_value=2**31 - 1, allow_null=True, required=False)
    restarts = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    last_exit_code = serializers.IntegerField(min_value=-(2**31), max_value=2**31 - 1, allow_null=True,
                                              required=False)
    uptime_s = serializers.FloatField(min_value=0, max_value=MAX_UPTIME_S, allow_null=True, required=False)
    slot_files_pruned = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False,
                                                 help_text="Slot files deleted to keep within the budget, "
                                                           "since the agent started.")


class HeartbeatRequest(serializers.Serializer):
    gpu_status = serializers.CharField(max_length=200, allow_blank=True)
    gpus = GpuReport(many=True)
    workers = WorkerReport(many=True)
    sent_at = serializers.FloatField(min_value=0, allow_null=True, required=False,
                                     help_text="The agent's clock when it sent the heartbeat, Unix seconds.")
    rehearsal = serializers.BooleanField(required=False, default=False,
                                         help_text="The rig's GPUs are faked (a rehearsal rig, telemetry = \"rehearsal\").")

    def validate_gpus(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        _unique(value, "index", "GPU index", most=MAX_GPUS)
        return value

    def validate_workers(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        _unique(value, "name", "worker name", most=MAX_WORKERS_PER_RIG)
        return value


def _reasons(errors: Any, where: str = "") -> list[str]:
    """DRF's nested error structure as flat 'workers[0].context_per_slot: message' lines."""
    if isinstance(errors, dict):
        lines = []
        for key, value in errors.items():
            if isinstance(key, int):
                path = f"{where}[{key}]"
            elif key == "non_field_errors":
                path = where
            else:
                path = f"{where}.{key}" if where else str(key)
            lines += _reasons(value, path)
        return lines
    if isinstance(errors, list):
        if all(isinstance(item, str) for item in errors):
            return [f"{where or 'body'}: {item}" for item in errors]
        return [line for index, item in enumerate(errors) if item for line in _reasons(item, f"{where}[{index}]")]
    return [f"{where or 'body'}: {errors}"]


def _refused(serializer: serializers.Serializer) -> Response:
    """400 naming every rejected value in `detail` (the agent writes it to its log), with DRF's
    per-field errors beside it."""
    reasons = _reasons(serializer.errors)
    return Response({"detail": "report refused: " + "; ".join(reasons), **serializer.errors},
                    status=status.HTTP_400_BAD_REQUEST)


def _rig(request: Request) -> Rig:
    assert isinstance(request.auth, Rig)  # IsRigAgent admitted only rig tokens
    return request.auth


class RegisterView(AgentView):
    def post(self, request: Request) -> Response:
        body = RegisterRequest(data=request.data)
        if not body.is_valid():
            return _refused(body)
        rig = _rig(request)
        try:
            workers = rig_register(rig=rig, **body.validated_data)
        except RigRefused as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
        except PermissionError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        # Each worker's new key goes to the rig that launches it, and to nobody else.
        return Response({"rig": rig.name,
                         "workers": [{"name": w.name, "state": w.state, "pool": w.pool.name, "api_key": w.api_key}
                                     for w in workers]})


class HeartbeatView(AgentView):
    def post(self, request: Request) -> Response:
        body = HeartbeatRequest(data=request.data)
        if not body.is_valid():
            return _refused(body)
        rig = _rig(request)
        rig_heartbeat(rig=rig, **body.validated_data)
        # The answer carries the rig's new jobs and the ids of cancelled ones (fleet/rig_jobs.py),
        # and, while a run measures the rig, the pace of its next heartbeats.
        return Response({"ok": True, **jobs_to_deliver(rig), **heartbeat_pace(rig)})


class JobReport(serializers.Serializer):
    state = serializers.ChoiceField(choices=["running", "done", "failed", "cancelled"])
    result = serializers.DictField(required=False)
    error = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    def validate_result(self, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value)) > MAX_RESULT_CHARS:
            raise serializers.ValidationError(f"a job's result must fit in {MAX_RESULT_CHARS} characters")
        return value


class JobReportView(AgentView):
    def post(self, request: Request, job_id: int) -> Response:
        body = JobReport(data=request.data)
        if not body.is_valid():
            return _refused(body)
        job = job_report(rig=_rig(request), job_id=job_id, **body.validated_data)
        if job is None:  # another rig's job, or none: a rig agent sees only its own
            return Response({"detail": "no such job for this rig"}, status=status.HTTP_404_NOT_FOUND)
        return Response({"id": job.pk, "state": job.state})
