"""The pages, the portal's and the agents' JSON, the admin. The public API (/v1/*, /ollama/*) and
the probes are not here: the lean path serves them (ocsweb/asgi.py, inference/routes.py)."""
from django.contrib import admin
from django.urls import include, path

from fleet import agent_api
from ocsweb import views
from portal import api as me_api

urlpatterns = [
    path("metrics", views.metrics),
    path("agent/v1/register", agent_api.RegisterView.as_view()),
    path("agent/v1/heartbeat", agent_api.HeartbeatView.as_view()),
    path("agent/v1/jobs/<int:job_id>", agent_api.JobReportView.as_view()),
    path("api/me/keys", me_api.KeyListView.as_view()),
    path("api/me/keys/<int:key_id>", me_api.KeyDetailView.as_view()),
    path("api/me/keys/<int:key_id>/revoke", me_api.KeyRevokeView.as_view()),
    path("api/me/usage", me_api.UsageView.as_view()),
    path("api/usage/<str:username>", me_api.UsageView.as_view()),
    path("admin/", admin.site.urls),
    path("research/", include("research.urls")),
    path("", include("lessons.urls")),  # lessons and /ground0/
    path("", include("portal.urls")),
]
