"""The serving engine, which knows nothing of HTTP: the service of one model, its dynamic batching and engines, the models of a server and their pivots, the server's terms and metrics."""
