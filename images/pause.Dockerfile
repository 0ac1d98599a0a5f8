# The pod sandbox image of the real test node, under containerd's default name
# registry.k8s.io/pause:3.10 (no registry is reachable here). The build context is a
# folder holding `pause`, images/pause.c compiled with `gcc -static`; `make images`
# prepares it.
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
