"""/ws/fleet/: the teacher's live fleet view. Staff only; the server pushes, the browser listens."""
from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts.access import is_teacher
from portal.fleet_live import CHANGES_GROUP, GROUP, publisher

FORBIDDEN = 4403


class FleetConsumer(AsyncJsonWebsocketConsumer):
    subscribed = False

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not is_teacher(user):
            await self.close(code=FORBIDDEN)
            return
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
        await self.send_json({"type": "status", "status": event["status"]})

    async def fleet_changed(self, event: dict[str, Any]) -> None:
        publisher.nudge()
