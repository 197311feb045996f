from __future__ import annotations

from datetime import date
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from accounts.login_throttle import login_refusal, refusal_message
from fleet.models import Pool
from lessons.day_input import DAY_EXAMPLE, DAY_FORMATS, MOMENT_EXAMPLE, MOMENT_FORMATS, day_text

# A 24-hour clock as the pages write it: a browser's time picker shows "--:-- --" (AM/PM) in an
# American browser beside the pages' 14:30.
CLOCK_FORMATS = ("%H:%M", "%H:%M:%S", "%H.%M")


class DayInput(forms.TextInput):
    """A day typed as the pages write it ("5 Dec 2026"): a browser's date picker shows its own
    locale's order (mm/dd/yyyy) beside the pages' dates."""

    def format_value(self, value: Any) -> str | None:
        if isinstance(value, date):
            return day_text(value)
        return super().format_value(value)

class PortalLoginForm(AuthenticationForm):
    """Fields `username` and `password`. Goes through the sign-in throttle (the authentication
    backend counts failures) and says plainly when sign-in is locked."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That username and password do not match. Passwords are case-sensitive.",
        "inactive": "This account is disabled. Ask your teacher.",
    }

    def clean(self) -> dict[str, Any]:
        reason = login_refusal(self.request, self.data.get("username"))
        if reason:
            raise forms.ValidationError(
                refusal_message(remedy="ask your teacher to unlock it"), code="locked")
        return super().clean()


class KeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, initial="laptop", label="Name",
                           help_text="Where you will use it, e.g. laptop or vscode.")


class ImportStudentsForm(forms.Form):
    file = forms.FileField(label="Class list (CSV: username, email, name)")
    classroom = forms.CharField(max_length=100, required=False, label="Class",
                                help_text="Put everyone in this class (created if new): a student already in another class "
                                          "moves to it, and the result says so. Empty: leave classes as they are.")
    initial_passwords = forms.BooleanField(
        required=False, label="Print an initial password for new students instead of a set-password link")

    MAX_BYTES = 1024 * 1024

    def clean_file(self) -> str:
        upload = self.cleaned_data["file"]
        if upload.size > self.MAX_BYTES:
            raise forms.ValidationError("The file is larger than 1 MB; a class list is much smaller.")
        raw = upload.read()
        try:
            return str(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise forms.ValidationError("The file is not UTF-8 text. Save it as 'CSV UTF-8' and try again.") from None


class LimitsForm(forms.Form):
    """The limit fields of a class or a student; empty = inherit. `inherited` (field -> the value
    an empty field takes, as text) shows in each empty field, so the teacher sees what applies."""

    def __init__(self, *args: Any, inherited: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, value in (inherited or {}).items():
            if name in self.fields:
                self.fields[name].widget.attrs["placeholder"] = f"inherits: {value}"

    requests_per_minute = forms.IntegerField(min_value=0, max_value=1_000_000, required=False,
                                             label="Requests per minute")
    tokens_per_day = forms.IntegerField(min_value=0, max_value=10**15, required=False, label="Tokens per day")
    tokens_per_week = forms.IntegerField(min_value=0, max_value=10**15, required=False, label="Tokens per week",
                                         help_text="Monday to Sunday, school time zone.")
    tokens_per_term = forms.IntegerField(min_value=0, max_value=10**15, required=False, label="Tokens per term",
                                         help_text="Counted between the class's term dates.")
    concurrency = forms.IntegerField(min_value=0, max_value=10_000, required=False, label="Requests at once")
    allowed_models = forms.CharField(max_length=500, required=False, label="Allowed models",
                                     help_text="Model ids, separated by spaces. Empty: all.")
    allowed_pools = forms.CharField(max_length=200, required=False, label="Allowed pools",
                                    help_text="Pool names, separated by spaces. Empty: all.")


class ShareWeightForm(forms.Form):
    """A class's share of the workers while they are busy (docs/classroom.md)."""

    fair_weight = forms.FloatField(min_value=0.1, max_value=10.0, label="Share weight",
                                   help_text="1 = an equal share per student; 2 = twice the share of a student "
                                             "in a class with 1, while both wait for a worker.")


class BudgetForm(forms.Form):
    """A one-off extra allowance (tokens) for the current day, week or term, or (no tokens) a reset."""

    period = forms.ChoiceField(choices=[("day", "today"), ("week", "this week"), ("term", "this term")],
                               label="Budget")
    tokens = forms.IntegerField(min_value=1, max_value=10**12, required=False, label="Extra tokens")


class TermForm(forms.Form):
    """A class's term: its token budget per term counts between these days (both included)."""

    term_starts = forms.DateField(required=False, label="Term starts", input_formats=DAY_FORMATS,
                                  widget=DayInput(attrs={"placeholder": DAY_EXAMPLE, "size": 12}))
    term_ends = forms.DateField(required=False, label="Term ends", input_formats=DAY_FORMATS,
                                widget=DayInput(attrs={"placeholder": DAY_EXAMPLE, "size": 12}))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        starts, ends = data.get("term_starts"), data.get("term_ends")
        if (starts is None) != (ends is None):
            raise forms.ValidationError("Give both term dates, or neither.")
        if starts is not None and ends is not None and ends < starts:
            raise forms.ValidationError("The term must end on or after its first day.")
        return data


class ClassNameForm(forms.Form):
    name = forms.CharField(max_length=100, label="Class name", help_text="e.g. Year 10 Computing")


class PauseForm(forms.Form):
    """Pause a class now: for some minutes, until a time of day (the next such time), or until resumed."""

    minutes = forms.IntegerField(min_value=1, max_value=7 * 24 * 60, required=False, label="For (minutes)")
    until = forms.TimeField(required=False, label="Or until (HH:MM)", input_formats=CLOCK_FORMATS,
                            widget=forms.TimeInput(format="%H:%M", attrs={"placeholder": "e.g. 10:30", "size": 6}))
    message = forms.CharField(max_length=200, required=False, label="Note for the students",
                              help_text="Shown with the refusal, e.g. 'Exam until 10:30: no AI'.")


class PauseWindowForm(forms.Form):
    """A weekly pause in the school's time zone; an end before the start ends the next day."""

    weekday = forms.TypedChoiceField(coerce=int, label="Day", choices=[(n, day) for n, day in enumerate(
        ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"))])
    starts = forms.TimeField(label="From (HH:MM)", input_formats=CLOCK_FORMATS,
                             widget=forms.TimeInput(format="%H:%M", attrs={"placeholder": "e.g. 09:00", "size": 6}))
    ends = forms.TimeField(label="To (HH:MM)", input_formats=CLOCK_FORMATS,
                           widget=forms.TimeInput(format="%H:%M", attrs={"placeholder": "e.g. 10:30", "size": 6}))
    message = forms.CharField(max_length=200, required=False, label="Note for the students")


class RequestFilterForm(forms.Form):
    student = forms.CharField(required=False, max_length=150, help_text="Part of a username.")
    classroom = forms.CharField(required=False, max_length=100, label="Class")
    model = forms.CharField(required=False, max_length=100)
    worker = forms.CharField(required=False, max_length=100)
    status = forms.ChoiceField(required=False, choices=[("", "any"), ("ok", "OK (2xx)"), ("error", "errors (4xx, 5xx)"),
                                                        ("429", "429 refused"), ("401", "401 bad key")])
    since = forms.DateTimeField(required=False, label="From", input_formats=MOMENT_FORMATS + DAY_FORMATS,
                                widget=forms.TextInput(attrs={"placeholder": MOMENT_EXAMPLE, "size": 18}))
    until = forms.DateTimeField(required=False, label="Until", input_formats=MOMENT_FORMATS + DAY_FORMATS,
                                widget=forms.TextInput(attrs={"placeholder": MOMENT_EXAMPLE, "size": 18}))


class MoveWorkerForm(forms.Form):
    pool = forms.ModelChoiceField(queryset=Pool.objects.order_by("name"), to_field_name="name")
