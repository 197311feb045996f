from __future__ import annotations

from django.urls import path

from lessons import views

urlpatterns = [
    path("lessons/", views.lesson_index),
    path("lessons/progress/", views.progress_page),
    path("lessons/summary/", views.summary_page),
    path("lessons/start/", views.start_page),
    path("lessons/fleet.json", views.fleet_json),
    path("lessons/teacher/", views.teacher_page),
    path("lessons/teacher/progress.csv", views.teacher_csv),
    path("lessons/<slug:slug>/", views.lesson_detail),
    path("lessons/<slug:slug>/steps/<slug:step_slug>/", views.step_check),
    path("lessons/<slug:slug>/questions/<slug:question_id>/", views.answer),
    path("ground0/", views.ground0_page),
    path("ground0/owners/", views.ground0_owner),
    path("ground0/sprint/", views.ground0_sprint),
    path("ground0/<slug:deliverable>/tick/", views.ground0_tick),
]
