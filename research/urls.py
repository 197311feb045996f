from __future__ import annotations

from django.urls import path

from research import views

app_name = "research"
urlpatterns = [
    path("", views.index, name="index"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/export.<str:fmt>", views.run_export, name="run_export"),
    path("groups/<slug:group>/", views.group_detail, name="group"),
    path("groups/<slug:group>/export.<str:fmt>", views.group_export, name="group_export"),
    path("compare/", views.compare, name="compare"),
    path("plan/", views.plan, name="plan"),
    path("plan/assume/", views.plan_assume, name="plan-assume"),
    path("rigs/", views.rigs, name="rigs"),
    path("checks/", views.checks, name="checks"),
    path("checks/<slug:name>/", views.check_detail, name="check"),
    path("experiments/<int:experiment_id>/", views.experiment_detail, name="experiment"),
    path("start/", views.start, name="start"),
    path("start/<int:web_run_id>/", views.web_run_detail, name="web_run"),
    path("start/<int:web_run_id>/progress.json", views.web_run_progress, name="web_run_progress"),
    path("baselines/<int:baseline_id>/", views.baseline_detail, name="baseline"),
]
