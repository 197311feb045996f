"""The research pages' forms: they parse and check, the services do the work."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms

from inference.admission.fair_share import POLICIES
from research.class_personas import parse_mix
from research.models import Calibration

MAX_SIZES = 6
MAX_STUDENTS = 60


class PlanClassForm(forms.Form):
    """What `plan_class` takes, bounded so that one page view simulates at most a few classes."""

    calibration = forms.ModelChoiceField(queryset=Calibration.objects.all())
    mix = forms.CharField(initial="agent:12,claude:6,codex:4,chat:6,burst:2",
                          help_text="PERSONA:COUNT,... from agent, claude, codex, chat, burst; scaled to each size.")
    students = forms.CharField(initial="5,10,20,30", help_text="Class sizes, up to 6, each up to 60.")
    workers = forms.IntegerField(min_value=1, max_value=16, initial=2,
                                 help_text="Workers of the calibrated kind: the school's two rigs run one each.")
    slots = forms.IntegerField(min_value=1, max_value=32, required=False, help_text="Empty: the calibration's.")
    context = forms.IntegerField(min_value=256, max_value=262_144, required=False,
                                 help_text="Tokens per slot. Empty: the calibration's, else 32,768.")
    cache_type = forms.ChoiceField(choices=[("", "the calibration's"), ("f16", "f16"), ("q8_0", "q8_0"),
                                            ("q4_0", "q4_0")], required=False)
    target_p95 = forms.FloatField(min_value=0.1, initial=60.0, label="Longest wait for an agent's first answer (s)",
                                  help_text="Met when 95 of every 100 agent turns get their first token within it.")
    duration = forms.FloatField(min_value=10, max_value=1800, initial=600, label="Simulated seconds")
    scale = forms.FloatField(min_value=0.01, max_value=1.0, initial=1.0)
    seed = forms.IntegerField(initial=1)
    replicates = forms.IntegerField(min_value=1, max_value=16, initial=1, required=False,
                                    help_text="Simulated runs averaged, each with the calibration's jitter: steadier "
                                              "tails, that many times slower (plan_class's default is 8).")
    policy = forms.ChoiceField(choices=[("", "this site's")] + [(p, p) for p in POLICIES], required=False)

    @classmethod
    def initial_query(cls) -> str:
        """The form's defaults as a query string (every field but the calibration)."""
        return urlencode({name: field.initial for name, field in cls.base_fields.items()
                          if name != "calibration" and field.initial is not None})

    def clean_mix(self) -> dict[str, int]:
        try:
            return parse_mix(self.cleaned_data["mix"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_students(self) -> list[int]:
        try:
            sizes = sorted({int(part) for part in self.cleaned_data["students"].split(",") if part.strip()})
        except ValueError:
            raise forms.ValidationError("class sizes separated by commas, e.g. 5,10,20,30") from None
        if not sizes or sizes[0] < 1 or sizes[-1] > MAX_STUDENTS or len(sizes) > MAX_SIZES:
            raise forms.ValidationError(f"1 to {MAX_SIZES} class sizes between 1 and {MAX_STUDENTS}")
        return sizes

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        mix = data.get("mix")
        if isinstance(mix, dict) and not {"agent", "claude", "codex"} & set(mix):
            self.add_error("mix", "the mix needs an agent persona (agent, claude, codex): the answer is about agents")
        return data
