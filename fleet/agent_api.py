"""The rig agents' API on the control plane (docs/agent-api.md). Rig tokens only: a student
key, a wrong token or none gets 401. DRF: declarative validation; low traffic, off the hot path."""
from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.models import Rig
from fleet.rigs import rig_authenticate, rig_heartbeat, rig_register


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


class WorkerDeclaration(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    model_id = serializers.CharField(max_length=200)
    port = serializers.IntegerField(min_value=1, max_value=65535)
    slots = serializers.IntegerField(min_value=1, max_value=256)
    context_per_slot = serializers.IntegerField(min_value=1, required=False)
    pool = serializers.SlugField(max_length=50, required=False)
    gpus = serializers.ListField(child=serializers.IntegerField(min_value=0), required=False)
    launch = serializers.DictField(required=False)


class RegisterRequest(serializers.Serializer):
    agent_version = serializers.CharField(max_length=50)
    workers = WorkerDeclaration(many=True)


class GpuReport(serializers.Serializer):
    index = serializers.IntegerField(min_value=0)
    name = serializers.CharField(max_length=100, allow_blank=True)
    uuid = serializers.CharField(max_length=100, allow_blank=True)
    memory_total_mib = serializers.IntegerField(min_value=0)
    memory_used_mib = serializers.IntegerField(min_value=0)
    utilization_pct = serializers.IntegerField(min_value=0, max_value=100, allow_null=True)
    temperature_c = serializers.IntegerField(min_value=0, allow_null=True)
    power_w = serializers.FloatField(min_value=0, allow_null=True)
    sm_clock_mhz = serializers.IntegerField(min_value=0, allow_null=True)
    mem_clock_mhz = serializers.IntegerField(min_value=0, allow_null=True)
    pcie_gen = serializers.IntegerField(min_value=0, allow_null=True)
    pcie_width = serializers.IntegerField(min_value=0, allow_null=True)


class WorkerReport(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    process_state = serializers.ChoiceField(choices=["stopped", "starting", "running", "backoff", "crashed"])
    pid = serializers.IntegerField(allow_null=True, required=False)
    restarts = serializers.IntegerField(min_value=0, required=False)
    last_exit_code = serializers.IntegerField(allow_null=True, required=False)


class HeartbeatRequest(serializers.Serializer):
    gpu_status = serializers.CharField(max_length=200, allow_blank=True)
    gpus = GpuReport(many=True)
    workers = WorkerReport(many=True)


def _rig(request: Request) -> Rig:
    assert isinstance(request.auth, Rig)  # IsRigAgent admitted only rig tokens
    return request.auth


class RegisterView(AgentView):
    def post(self, request: Request) -> Response:
        body = RegisterRequest(data=request.data)
        body.is_valid(raise_exception=True)
        rig = _rig(request)
        try:
            workers = rig_register(rig=rig, **body.validated_data)
        except PermissionError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response({"rig": rig.name,
                         "workers": [{"name": w.name, "state": w.state, "pool": w.pool.name} for w in workers]})


class HeartbeatView(AgentView):
    def post(self, request: Request) -> Response:
        body = HeartbeatRequest(data=request.data)
        body.is_valid(raise_exception=True)
        rig_heartbeat(rig=_rig(request), **body.validated_data)
        return Response({"ok": True})
