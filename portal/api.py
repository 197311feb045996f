"""The portal's JSON API for a signed-in person: their own keys and usage. Someone else's key
or usage answers 404, exactly like one that does not exist (a teacher sees their classes'
students'; an admin everyone's: accounts/selectors.py)."""
from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.audit import acting_user
from accounts.models import ApiKey, User
from accounts.selectors import keys_visible_to, people_visible_to
from accounts.services import TooManyKeys, key_issue, key_revoke
from inference.selectors import usage_summary


class KeySerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="user.username", read_only=True)
    pool = serializers.CharField(source="pool.name", read_only=True)

    class Meta:
        model = ApiKey
        fields = ["id", "display", "name", "owner", "pool", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = fields


class NewKeySerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, default="default")


def _viewer(request: Request) -> User:
    user = request.user
    assert isinstance(user, User)  # IsAuthenticated ran first
    return user


class KeyListView(APIView):
    def get(self, request: Request) -> Response:
        viewer = _viewer(request)
        keys = keys_visible_to(viewer).filter(user=viewer)
        return Response(KeySerializer(keys, many=True).data)

    def post(self, request: Request) -> Response:
        viewer = _viewer(request)
        new = NewKeySerializer(data=request.data)
        new.is_valid(raise_exception=True)
        try:
            key, raw = key_issue(user=viewer, name=new.validated_data["name"])
        except TooManyKeys as refused:
            return Response({"detail": str(refused)}, status=409)
        data: dict[str, Any] = {**KeySerializer(key).data, "key": raw,
                                "warning": "Copy the key now: it is shown only this once."}
        return Response(data, status=201)


class KeyDetailView(APIView):
    def get(self, request: Request, key_id: int) -> Response:
        return Response(KeySerializer(get_object_or_404(keys_visible_to(_viewer(request)), id=key_id)).data)


class KeyRevokeView(APIView):
    def post(self, request: Request, key_id: int) -> Response:
        key = get_object_or_404(keys_visible_to(_viewer(request)), id=key_id)
        key_revoke(key=key, actor=acting_user(request._request))
        return Response(KeySerializer(key).data)


class UsageView(APIView):
    def get(self, request: Request, username: str | None = None) -> Response:
        viewer = _viewer(request)
        person = viewer if username is None else get_object_or_404(people_visible_to(viewer), username=username)
        return Response(usage_summary(person))
