"""The exit handler of a Kubeflow pipeline: alerts when the run failed and exports the run's
metrics (see component.py)."""
