"""Translation over HTTP: the service, its dynamic batching, its metrics and request log, and the
routes."""
