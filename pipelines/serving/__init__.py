"""Serving: TF Serving's config files and Kubernetes manifests for a pipeline's pushes, and a
local model server that speaks TF Serving's REST API (`conveyor serve`)."""
