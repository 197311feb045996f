"""The #27148 probe's reading of answers (research/prompt_cache_probe.py) and its server flags."""
from __future__ import annotations

from fleet.local_worker import ISOLATION_ARGS, LlamaServerSpec
from research.management.commands.prompt_cache_probe import ProbeSpec, without
from research.prompt_cache_probe import (
    ProbeAnswer,
    VariantResult,
    markers,
    markers_in,
    seed_messages,
    verdict,
)


def test_markers_are_distinct_rare_words_with_digits_and_repeatable():
    found = markers(8, seed=3)
    assert len(set(found)) == 8
    assert found == markers(8, seed=3)
    assert all(word.isalpha() and digits.isdigit() for word, digits in (m.split("-") for m in found))


def test_a_marker_is_found_by_its_word_in_any_case_and_only_then():
    known = ["KESTREL-4817", "OBSIDIAN-1200"]
    assert markers_in("the kestrel-48 again", known) == ["KESTREL-4817"]
    assert markers_in("Paris is the capital of France.", known) == []
    assert "KESTREL-4817" in " ".join(m["content"] for m in seed_messages("KESTREL-4817"))


def answer(round_: int, text: str, baseline: str = "Paris.", **extra) -> ProbeAnswer:
    return ProbeAnswer(round=round_, question="q", answer=text, baseline=baseline, **extra)


def test_the_summary_counts_marked_answers_rounds_and_differences_apart():
    result = VariantResult(name="defaults", flags=[], markers=["KESTREL-4817", "MARLIN-2222"])
    result.answers = [
        answer(0, "Paris."),                                     # clean and equal
        answer(0, "KESTREL-4817 KESTREL", cached_tokens=0),      # a classmate's marker
        answer(1, "Paris, France."),                             # differs, no marker
        answer(1, "marlin marlin", cached_tokens=0),             # another marker, another round
        answer(2, "", error="timeout"),                          # an error is neither
    ]
    summary = result.summary()
    assert summary["answers"] == 5 and summary["rounds"] == 3 and summary["errors"] == 1
    assert summary["answers_with_a_marker"] == 2 and summary["rounds_with_a_marker"] == 2
    assert summary["answers_differing_from_clean"] == 3
    assert summary["cached_tokens_of_marked_answers"] == [0, 0]
    assert "reproduced" in verdict({"defaults": summary}) and "not reproduced" not in verdict({"defaults": summary})


def test_a_variant_without_a_marker_is_not_reproduced_and_says_how_many_differ():
    result = VariantResult(name="platform", flags=list(ISOLATION_ARGS), markers=["KESTREL-4817"])
    result.answers = [answer(0, "Paris."), answer(0, "Lyon.")]
    line = verdict({"platform": result.summary()})
    assert line.startswith("platform: not reproduced") and "1 differ" in line


def test_the_defaults_variant_is_the_platform_command_without_the_isolation_flags(tmp_path):
    args = LlamaServerSpec(model_path=tmp_path / "m.gguf", slots=2).command(tmp_path / "llama-server")
    defaults = without(args, ISOLATION_ARGS)
    assert "--cache-ram" in args and "--cache-ram" not in defaults and "--no-kv-unified" not in defaults
    assert len(defaults) == len(args) - len(ISOLATION_ARGS) and "--parallel" in defaults
    assert without(defaults, ISOLATION_ARGS) == defaults
    probe = dict(model_path=tmp_path / "m.gguf", slots=2)
    assert ProbeSpec(**probe, isolated=False).command(tmp_path / "llama-server") == defaults
    assert ProbeSpec(**probe).command(tmp_path / "llama-server") == args  # the platform's, unchanged
