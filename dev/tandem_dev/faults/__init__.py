"""Reliability checks against real processes: the fault suite, the soak and the fuzz.

- ``netbed``: network namespaces on a private bridge (partitions with iptables inside
  them, a slow link with ``tc``), made and removed by the suite itself;
- ``load``: steady load from the official ``openai`` client and what each request became
  (answered, a clean OpenAI error, a dropped connection, lost, hung);
- ``bed``: a local InferenceCluster under the real supervisor, workers in namespaces;
- ``scenarios``: the data-plane faults; ``report``: their counts and table;
- ``local``: a cluster started as ``tandem up --detach`` does; ``soak``: twice capacity for
  a long time with every process sampled; ``fuzz``: generated HTTP requests.

The control-plane faults are ``tandem_dev.faults.control_plane``.
"""
