"""Names of the task queues (shared by the services that choose one and the backends)."""

LARGE_QUEUE = "large"  # audits of large responses: the thread backend's own lane
