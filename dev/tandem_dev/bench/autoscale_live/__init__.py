"""The autoscaler judged by users' outcomes, in the real loop (``python -m
tandem_dev.bench.autoscale_live``).

Each trace is replayed in real time against ``tandem up`` of simulated gpt-oss-120b
workers with the builtin autoscaler on: the supervisor's :class:`LocalAutoscaler` reads
the frontend's metrics, asks the policy and starts, drains and stops worker processes,
while the official ``openai`` client streams every request of the trace. What users got
(each request's TTFT and mean ITL against the SLO) and what the pools cost (GPU-seconds
from the workers that existed, starting and draining ones included) are compared with
the SLO oracle (``tandem_dev.autoscale_sim.slo_oracle``), which replays the same requests
through the same engines in virtual time and keeps, per interval, the fewest workers
that serve every request within the SLO.

- ``traces``: the load shapes, sized so a 2-core machine's plumbing keeps the clock;
- ``replay``: one run (the I/O shell);
- ``judge``: the figures from a run and the oracle's plans (pure).
"""
