"""Lesson 7's roofline lab, the arithmetic: a single stream's decode ceiling is the memory
bandwidth divided by the bytes of weights read per token, and a measurement is judged against
the student's own prediction. Pure: numbers in, numbers and words out."""
from __future__ import annotations

# The short measurement the lab starts (through the gateway, one stream: a decode rate, not a
# throughput): small enough for a CPU demo, long enough for a stable per-token time.
LAB_PROMPT_TOKENS = 32
LAB_OUTPUT_TOKENS = 64
LAB_REQUESTS = 3
PREDICTION_TOLERANCE = 0.10  # the prediction must follow from the student's own two numbers
MIN_EXPLANATION_CHARS = 40


class LabInputError(ValueError):
    """A prediction or explanation the lab cannot accept; the message is for the student."""


def ceiling_tok_s(*, bandwidth_gbs: float, weights_gb: float) -> float:
    """Tokens per second one stream can at most decode: every weight is read once per token."""
    return bandwidth_gbs / weights_gb


def check_prediction(*, bandwidth_gbs: float, weights_gb: float, predicted_tok_s: float) -> None:
    for name, value in (("the bandwidth", bandwidth_gbs), ("the weights' size", weights_gb),
                        ("your predicted ceiling", predicted_tok_s)):
        if not 0 < value < 1e6:
            raise LabInputError(f"Give {name} as a positive number.")
    expected = ceiling_tok_s(bandwidth_gbs=bandwidth_gbs, weights_gb=weights_gb)
    if abs(predicted_tok_s - expected) > PREDICTION_TOLERANCE * expected:
        raise LabInputError(
            f"With {bandwidth_gbs:g} GB/s and {weights_gb:g} GB of weights read per token, the ceiling is "
            f"{bandwidth_gbs:g} ÷ {weights_gb:g} tokens per second. Work it out and enter that.")


def decode_tok_s(tpot_p50_ms: float | None) -> float | None:
    """One stream's measured decode rate from its median time per output token."""
    return None if not tpot_p50_ms or tpot_p50_ms <= 0 else 1000.0 / tpot_p50_ms


def check_explanation(text: str) -> str:
    text = " ".join(text.split())
    if len(text) < MIN_EXPLANATION_CHARS:
        raise LabInputError(f"Explain the gap between your ceiling and the measurement in a sentence or two "
                            f"(at least {MIN_EXPLANATION_CHARS} characters): what else takes time per token?")
    return text[:1000]


def verdict(*, predicted_tok_s: float, measured_tok_s: float) -> str:
    share = measured_tok_s / predicted_tok_s
    return (f"measured {measured_tok_s:.1f} tok/s per stream against your ceiling of {predicted_tok_s:.1f}: "
            f"{100 * share:.0f} % of it" + (" (above the ceiling: are the bandwidth or the bytes per token right?)"
                                             if share > 1.05 else ""))
