import os

# Keep UCX (NIXL) on the loopback interface: tests never send traffic off 127.0.0.0/8.
os.environ.setdefault("UCX_NET_DEVICES", "lo")
