"""Observe and report: live objects -> facts -> the InferenceCluster's status (pure).

- ``observe``        raw API objects -> small typed observations; stored object -> model
- ``compute``        ``compute_status(cr, observed, now)``: conditions, pool counts, events
- ``capacity_gate``  may this generation roll out? (the engine accepts it, the GPUs fit it)
"""
