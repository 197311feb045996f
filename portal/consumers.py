"""/ws/fleet/: the teacher's live fleet view. Teachers only (accounts.access.is_teacher);
the server pushes, the browser listens. Access is re-checked against the database before every
push: a teacher who is disabled or loses the staff flag gets no further push, and the socket
closes."""
from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts.access import is_teacher
from accounts.models import User
from core.db import fresh_connection
from portal.fleet_push import CHANGES_GROUP, GROUP, publisher

FORBIDDEN = 4403


@fresh_connection
def _still_teacher(user_id: int) -> bool:
    user = User.objects.filter(id=user_id).only("is_active", "is_staff").first()
    return user is not None and is_teacher(user)


class FleetConsumer(AsyncJsonWebsocketConsumer):
    subscribed = False
    user_id = 0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not is_teacher(user):
            await self.close(code=FORBIDDEN)
            return
        self.user_id = user.id
        await self.accept()
        await self.channel_layer.group_add(GROUP, self.channel_name)
        await self.channel_layer.group_add(CHANGES_GROUP, self.channel_name)
        self.subscribed = True
        await self.send_json({"type": "status", "status": await publisher.subscribe()})

    async def disconnect(self, code: int) -> None:
        if self.subscribed:
            self.subscribed = False
            publisher.unsubscribe()
            await self.channel_layer.group_discard(GROUP, self.channel_name)
            await self.channel_layer.group_discard(CHANGES_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Nothing to receive: actions are forms (CSRF-checked POSTs), not socket messages."""

    async def fleet_status(self, event: dict[str, Any]) -> None:
        if not await sync_to_async(_still_teacher, thread_sensitive=False)(self.user_id):
            await self.close(code=FORBIDDEN)
            await self.disconnect(FORBIDDEN)
            return
        await self.send_json({"type": "status", "status": event["status"]})

    async def fleet_changed(self, event: dict[str, Any]) -> None:
        publisher.nudge()
