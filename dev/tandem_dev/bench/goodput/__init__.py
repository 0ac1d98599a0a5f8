"""Goodput of aggregated vs disaggregated gpt-oss-120b serving, simulated GPUs.

aiperf (NVIDIA's client, its own venv under .bench/) drives the real stack -- frontend,
router, workers, leases, KV handoff -- whose simulated engines keep a GPU-shaped clock;
the same deployments also run in virtual time (``tandem.sim``) at every concurrency of
the sweep, and the rate-matched ideal comes from the same performance model. Wall times
of the real stack are converted to modelled time by the engines' speed-up factor.
"""
