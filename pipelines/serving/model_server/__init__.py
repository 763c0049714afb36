"""A local model server that speaks TF Serving's REST API:
`python -m pipelines.serving.model_server` or `conveyor serve`.

- `servable.py`: one loaded version of a SavedModel and its Predict, Classify and Regress calls;
- `json_tensor.py`: TF Serving's JSON mapping, request bodies to tensors and back;
- `batching.py`: server-side batching (`--enable-batching`), concurrent calls of a signature
  merged into one;
- `repository.py`: the models served, polled from their base paths (or a models.config) and
  swapped atomically;
- `app.py`: the ASGI application uvicorn serves (REST paths, Prometheus metrics);
  `metrics.py` the metrics;
- `server.py`: uvicorn, the polling thread and the ready file, and with `--workers` the worker
  processes sharing one port; `__main__.py` the command line.

Nothing here is imported by `conveyor --help`: TensorFlow loads when the server starts.
"""
