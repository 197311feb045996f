from django.contrib import admin
from django.urls import path, re_path

from inference import views as api
from ocsweb import views

urlpatterns = [
    path("healthz", views.healthz),
    path("readyz", views.readyz),
    path("v1/models", api.models_list),
    path("v1/chat/completions", api.chat_completions),
    re_path(r"^v1/(?P<rest>.*)$", api.not_found),
    path("admin/", admin.site.urls),
]
