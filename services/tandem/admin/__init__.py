"""The admin listener: ``/drain`` on a Unix socket inside the pod (or the local
cluster's state directory), never on a network port.

Draining a worker or frontend stops it taking work; over the network that would let any
pod that can reach it take a cluster's capacity away. Kubernetes runs the ``preStop``
hook inside the container (``python -m tandem.admin drain --socket PATH``), so the hook
needs no network path at all. The socket file is created with mode 0600 in a directory
only the pod (``/tmp``, an emptyDir) or the local user can enter.
"""

from tandem.admin.server import (
    EmbeddedServer,
    bind_tcp,
    bind_unix,
    create_admin_app,
    create_embedded_server,
)

__all__ = ["EmbeddedServer", "bind_tcp", "bind_unix", "create_admin_app", "create_embedded_server"]
