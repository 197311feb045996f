from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from portal import school_views
from portal import teacher_views as teacher
from portal import views
from portal.forms import PortalLoginForm

app_name = "portal"

urlpatterns = [
    path("", views.home, name="home"),
    path("keys/", views.keys, name="keys"),
    path("keys/<int:key_id>/revoke/", views.key_revoke_view, name="key-revoke"),
    path("usage/", views.usage, name="usage"),
    path("connect/", views.connect, name="connect"),
    path("chat/", views.chat, name="chat"),
    path("chat/key/", views.chat_key, name="chat-key"),
    path("accounts/login/", views.SignInView.as_view(
        authentication_form=PortalLoginForm, template_name="registration/login.html",
        redirect_authenticated_user=True), name="login"),
    path("accounts/school/start/", school_views.SchoolSignInStart.as_view(), name="school-start"),
    path("accounts/school/callback/", school_views.SchoolSignInCallback.as_view(), name="school-callback"),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="/accounts/login/"), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(
        template_name="registration/password_change.html", success_url="/accounts/password/done/"),
        name="password-change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(
        template_name="registration/password_change_done.html"), name="password-change-done"),
    path("accounts/set-password/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(
        template_name="registration/set_password.html", success_url="/", post_reset_login=True,
        post_reset_login_backend="accounts.login_throttle.ThrottledModelBackend"), name="set-password"),
    path("teacher/", teacher.index, name="teacher"),
    path("teacher/classes/new/", teacher.class_create, name="teacher-class-create"),
    path("teacher/classes/<int:class_id>/", teacher.classroom, name="teacher-class"),
    path("teacher/classes/<int:class_id>/rename/", teacher.class_rename, name="teacher-class-rename"),
    path("teacher/classes/<int:class_id>/archive/", teacher.class_archive, name="teacher-class-archive"),
    path("teacher/classes/none/", teacher.classroom, name="teacher-no-class"),
    path("teacher/students/<int:user_id>/", teacher.student, name="teacher-student"),
    path("teacher/students/<int:user_id>/active/", teacher.student_set_active, name="teacher-student-active"),
    path("teacher/students/<int:user_id>/move/", teacher.student_move_view, name="teacher-student-move"),
    path("teacher/students/<int:user_id>/link/", teacher.student_link, name="teacher-student-link"),
    path("teacher/students/<int:user_id>/sign-in-unlock/", teacher.student_sign_in_unlock,
         name="teacher-student-sign-in-unlock"),
    path("teacher/students/<int:user_id>/budget/<str:action>/", teacher.student_budget,
         name="teacher-student-budget"),
    path("teacher/students/<int:user_id>/limits/", teacher.student_limits, name="teacher-student-limits"),
    path("teacher/classes/<int:class_id>/limits/", teacher.class_limits, name="teacher-class-limits"),
    path("teacher/classes/<int:class_id>/weight/", teacher.class_weight, name="teacher-class-weight"),
    path("teacher/classes/<int:class_id>/self-enrolment/", teacher.class_self_enrolment,
         name="teacher-class-self-enrolment"),
    path("teacher/classes/<int:class_id>/chat/", teacher.class_chat, name="teacher-class-chat"),
    path("teacher/classes/<int:class_id>/term/", teacher.class_term, name="teacher-class-term"),
    path("teacher/classes/<int:class_id>/pause/", teacher.class_pause_view, name="teacher-class-pause"),
    path("teacher/classes/<int:class_id>/resume/", teacher.class_resume_view, name="teacher-class-resume"),
    path("teacher/classes/<int:class_id>/timetable/", teacher.class_window_add, name="teacher-class-window-add"),
    path("teacher/classes/<int:class_id>/timetable/<int:window_id>/remove/", teacher.class_window_remove,
         name="teacher-class-window-remove"),
    path("teacher/keys/<int:key_id>/revoke/", teacher.key_revoke_view, name="teacher-key-revoke"),
    path("teacher/import/", teacher.import_students, name="teacher-import"),
    path("teacher/usage/", teacher.usage, name="teacher-usage"),
    path("teacher/requests/", teacher.requests, name="teacher-requests"),
    path("teacher/fleet/", teacher.fleet, name="teacher-fleet"),
    path("teacher/fleet/workers/<int:worker_id>/<str:action>/", teacher.worker_action, name="teacher-worker-action"),
]
