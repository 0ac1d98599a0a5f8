"""Adaptive against static, measured (``python -m tandem_dev.bench.adaptive``).

Each trace is replayed in real time (``autoscale_live.replay``: the official ``openai``
client streaming every arrival) against ``tandem up`` of simulated gpt-oss-120b GB200
workers, once per row:

- **static aggregated** and **static disaggregated**: the fewest-GPU deployment of each
  layout that ``tandem plan``'s search (``tandem.sim.planner.recommend``) finds meeting
  the SLO at the trace's average load, pools fixed;
- **autoscaling**: a hand-written 1P+1D with the builtin autoscaler
  (``autoscale_live``'s default policy);
- **planning auto**: the same pools with ``spec.slo``, ``spec.workload`` (the trace's
  first quarter: what a user knows when deploying, ``rows.deploy_time_workload``) and
  ``planning.mode: auto``, so ``tandem up`` plans, autoscales, re-plans when the load
  leaves that envelope, and rolls (``tandem.runtime.replanner``).

- ``traces``: the issue's load shapes, sized for a small machine;
- ``rows``: the deployments (pure);
- ``judge``: the figures of a run (pure);
- ``__main__``: runs and prints the markdown section.
"""
