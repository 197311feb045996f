"""The capacity planner: what a class will feel on a configuration, before the rig time is spent.

- `cost.py`: a worker's cost model (seconds per prompt token and per token of context before it,
  per decode step by batch and context) and its TokenModel (how the worker counts tokens);
- `sim.py`: the discrete-event fleet simulator, pure, calling the gateway's own policies;
- `workload.py`: the class replay's students for it (personas, seeds, pauses);
- `plan.py`: one prediction in the replay's JSON shape, a sweep over class sizes, the answer;
- `tokens.py`: measuring the TokenModel with the worker's tokenizer over the personas' messages;
- `fit.py`: fitting a cost model to stored benchmark runs; `assumptions.py`: one from stated
  assumptions (roofline, public Pascal figures), each with its source;
- `rigs.py`: the search over the configurations the rigs could run (model, cards per worker, slots x
  context, KV cache type, shared prefix), ranked by students served; `rigs_report.py` its table and chart.

docs/research/planner.md explains the model.
"""
