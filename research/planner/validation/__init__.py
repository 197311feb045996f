"""The planner's predict-then-measure checks as data, and the analyses that feed them. Pure: no Django.

- `records.py`: a check (planner_check's result) as rows: one per configuration and figure, the
  counts, the machine's noise in words; the passes' history (research/data/planner_checks.json);
- `noise.py`: the noise beside a check, read from scripts/validate_planner.sh's files;
- `step_timing.py`: every iteration of llama-server's loop rebuilt from a trace log and costed with
  a calibration (`manage.py step_timing`; scripts/validate_planner.sh's load factor).
"""
