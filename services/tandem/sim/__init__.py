"""Virtual-time runs of a whole deployment: the simulated engine's own scheduler and
clock, the router's own policy, no processes and no wall clock. What the benchmarks
compare the real stack with, what ``tandem plan`` searches, and what the SLO oracle for
the autoscaler searches."""
