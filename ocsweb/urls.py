from django.contrib import admin
from django.urls import include, path, re_path

from fleet import agent_api
from inference import views as api
from ocsweb import views
from portal import api as me_api

urlpatterns = [
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("metrics", views.metrics),
    path("v1/models", api.models_list),
    path("v1/openapi.json", api.openapi),
    path("v1/chat/completions", api.chat_completions),
    path("v1/completions", api.completions),
    path("v1/responses", api.responses_create),
    path("v1/messages", api.messages),
    path("v1/messages/count_tokens", api.count_tokens),
    path("ollama/<str:key>/api/version", api.ollama_version),
    path("ollama/<str:key>/api/tags", api.ollama_tags),
    path("ollama/<str:key>/api/show", api.ollama_show),
    path("ollama/<str:key>/v1/chat/completions", api.ollama_chat_completions),
    path("ollama/<str:key>/v1/models", api.ollama_models_list),
    re_path(r"^ollama/(?P<key>[^/]+)/(?P<rest>.*)$", api.not_found),
    re_path(r"^v1/(?P<rest>.*)$", api.not_found),
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
