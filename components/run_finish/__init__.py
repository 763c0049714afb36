"""The exit handler of a Kubeflow pipeline: alerts when the run failed (see component.py)."""
