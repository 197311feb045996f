from django.contrib import admin
from django.urls import path, re_path

from fleet import agent_api
from inference import views as api
from ocsweb import views

urlpatterns = [
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("v1/models", api.models_list),
    path("v1/chat/completions", api.chat_completions),
    re_path(r"^v1/(?P<rest>.*)$", api.not_found),
    path("agent/v1/register", agent_api.RegisterView.as_view()),
    path("agent/v1/heartbeat", agent_api.HeartbeatView.as_view()),
    path("admin/", admin.site.urls),
]
