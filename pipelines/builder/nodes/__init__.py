"""One module per component type: its `build(ctx, node_id)` (see `pipelines.spec.components`).

Build functions import TFX inside their bodies, each name from its own module and never through
`tfx.v1` (that package also imports its Google Cloud extensions, about 8 s here), so that
listing and validating specs never pays for TensorFlow.
"""
