"""Lesson 7's roofline lab: the student predicts a decode ceiling from a bandwidth and a model's
size, starts a short measurement from the page (a research web run through the gateway, as their
own requests), and explains the gap; the step is done only with all three."""
from __future__ import annotations

import pytest
from django.conf import settings

from lessons.roofline_lab import LabInputError, ceiling_tok_s, check_explanation, check_prediction, decode_tok_s

STEP = "/lessons/measurement/steps/roofline-lab/"
EXPLANATION = "Each token also waits for the attention over the context and the gateway's hop, not only weights."


def test_the_ceiling_is_bandwidth_over_weights_and_the_prediction_must_follow_from_them() -> None:
    assert ceiling_tok_s(bandwidth_gbs=256, weights_gb=16.2) == pytest.approx(15.8, abs=0.05)
    check_prediction(bandwidth_gbs=256, weights_gb=16.2, predicted_tok_s=16)  # within 10 %
    with pytest.raises(LabInputError, match="256 ÷ 16.2"):
        check_prediction(bandwidth_gbs=256, weights_gb=16.2, predicted_tok_s=110)  # the old lesson's error
    with pytest.raises(LabInputError, match="positive number"):
        check_prediction(bandwidth_gbs=0, weights_gb=16.2, predicted_tok_s=1)
    assert decode_tok_s(50.0) == 20.0 and decode_tok_s(None) is None and decode_tok_s(0) is None
    with pytest.raises(LabInputError, match="at least 40 characters"):
        check_explanation("it is slower")
    assert check_explanation("  " + EXPLANATION + "  ") == EXPLANATION


@pytest.mark.integration
def test_a_student_predicts_measures_through_the_gateway_and_explains(client, student, worker, gateway) -> None:  # noqa: ANN001
    from accounts.models import ApiKey
    from lessons.models import RooflineLab, StepDone
    from research.models import WebRun
    from research.web_runs import web_run_execute

    client.force_login(student)
    page = client.get("/lessons/measurement/").content.decode()
    assert 'id="step-roofline-lab"' in page and 'id="predict-roofline-lab"' in page

    assert "Start the measurement" not in client.get("/lessons/measurement/").content.decode()
    wrong = client.post(STEP, {"action": "predict", "bandwidth_gbs": "256", "weights_gb": "16.2",
                               "predicted_tok_s": "110"}, follow=True).content.decode()
    assert "256 ÷ 16.2" in wrong and not RooflineLab.objects.exists()
    early = client.post(STEP, {"explanation": EXPLANATION}, follow=True).content.decode()
    assert "Predict the ceiling first" in early

    client.post(STEP, {"action": "predict", "bandwidth_gbs": "30", "weights_gb": "0.27", "predicted_tok_s": "111"})
    lab = RooflineLab.objects.get(user=student)
    assert lab.predicted_tok_s == 111
    assert "Now start the measurement" in client.post(STEP, {"explanation": EXPLANATION}, follow=True).content.decode()

    client.post(STEP, {"action": "measure"}, HTTP_HOST="127.0.0.1:19599")  # a forged Host changes nothing
    lab.refresh_from_db()
    web_run = lab.web_run
    assert web_run is not None and web_run.via_gateway and web_run.requested_by == student
    assert web_run.gateway_url == settings.OCS_RUNS_BASE_URL
    again = client.post(STEP, {"action": "measure"}, follow=True).content.decode()
    assert "still running" in again and WebRun.objects.count() == 1  # one measurement at a time
    # What the runs task cluster does with it (tests/research/test_web_runs.py runs the real
    # cluster); here against the session's gateway, as the page's own address is not served.
    WebRun.objects.filter(pk=web_run.pk).update(gateway_url=gateway.url)
    web_run_execute(web_run.pk)
    web_run.refresh_from_db()
    assert web_run.status == WebRun.Status.DONE, web_run.error
    assert ApiKey.objects.get(user=student, name=f"web-run-{web_run.pk}").revoked_at is not None

    terse = client.post(STEP, {"explanation": "slower"}, follow=True).content.decode()
    assert "tok/s per stream against your ceiling of 111.0" in terse and "at least 40 characters" in terse
    assert not StepDone.objects.filter(user=student, step="roofline-lab").exists()
    client.post(STEP, {"explanation": EXPLANATION})
    done = StepDone.objects.get(user=student, step="roofline-lab")
    assert "against your ceiling of 111.0" in done.evidence and "attention over the context" in done.evidence
