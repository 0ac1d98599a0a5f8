"""``tandem plan`` side by side with NVIDIA's AIConfigurator (``make bench``).

Both tools size a deployment of gpt-oss on the same measured TensorRT-LLM kernel data
(aiconfigurator-core's database: Tandem's measured clock reads it too), for the same
workload and SLO, and each judges the other's pick, so that neither grades only itself:

* AIConfigurator (its own venv, ``.bench/aiconfigurator``, driven by ``aic_driver.py``
  in-process there) recommends the fewest GPUs for the rate, aggregated and
  disaggregated, and estimates Tandem's pick at the rate (the batch that carries it);
* Tandem's planner plans each cell, and replays AIConfigurator's pick in its simulated
  cluster (the engine's scheduler and clock, the router's policy, Poisson arrivals).

The grid: gpt-oss-120b and gpt-oss-20b on GB200, B200 and H200; ISL/OSL 1k/1k, 8k/1k and
32k/1k; TPOT 6, 10 and 20 ms (TTFT by ISL); two request rates each. At 32k the section
also shows each pick's longest gap between tokens, the best deployment under a stall
bound, and both tools' Pareto curves, with the largest interactivity gain of
disaggregation at equal tokens/s/GPU.
"""
