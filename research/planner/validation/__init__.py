"""The planner's predict-then-measure checks as data, and the analyses that feed them. Pure: no Django.

- `records.py`: a check (planner_check's result) as rows: one per configuration and figure, the
  counts, the machine's noise in words; the twenty passes' history (research/data/planner_checks.json);
- `step_timing.py`: every iteration of llama-server's loop rebuilt from a trace log and costed with
  a calibration (`manage.py step_timing`; scripts/validate_planner.sh's load factor);
- `candidates.py`: configurations predicted with several cost models, to choose a set that parts
  (`manage.py planner_candidates`);
- `rig_forecast.py`: the rig forecast's slot-file and shared-prefix tables (`manage.py rig_forecast`).
"""
