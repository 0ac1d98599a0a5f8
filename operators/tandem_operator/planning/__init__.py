"""Planning an InferenceCluster's shape from its SLO and workload, off the reconcile path:
plans run in child processes (``runner``), cached by the hash of what they read
(``service``); a reconcile never waits for one."""
