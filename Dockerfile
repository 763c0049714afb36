# The pipeline image: every Kubeflow / Vertex AI node (TFX's components and Conveyor's own: the
# Arrow reader, the data gate, the trainer, the pusher) runs in it, and Dataflow / Flink / Spark
# workers can use it as their SDK container. Built from the same lock as `make setup`:
#   docker build -t REGISTRY/conveyor:TAG .   then set runtime.container.image in the profile.
FROM python:3.10.13-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TF_USE_LEGACY_KERAS=1 \
    TF_CPP_MIN_LOG_LEVEL=3 \
    UV_NO_CACHE=1

# The project lives here; profiles name it in runtime.container.project_root.
WORKDIR /conveyor

# uv, pinned as in the Makefile; pip stays in the image (TFX installs user modules with it).
RUN python -m pip install --no-cache-dir uv==0.13.9

# Dependencies first, from the lock alone, so a code change does not reinstall them.
COPY requirements.lock ./
RUN uv pip sync --system requirements.lock

COPY pyproject.toml README.md ./
COPY pipelines ./pipelines
COPY components ./components
COPY schemas ./schemas
COPY configs ./configs
RUN uv pip install --system --no-deps -e . \
    && python -c "import pipelines.builder.pipeline, components.trainer.run, components.data_gate.component"

# KubeflowV2DagRunner gives each container its command (TFX's executor entry point).
CMD ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor", "--help"]
