# The pipeline image: Conveyor, installed as a package, and one project, at /conveyor. Every
# Kubeflow / Vertex AI node (TFX's components and Conveyor's own: the Arrow reader, the data gate,
# the trainer, the pusher) runs in it, and Dataflow / Flink / Spark workers can use it as their
# SDK container. Built from Conveyor's source checkout (the build context) and the same lock as
# `make setup`:
#   docker build -t REGISTRY/conveyor:TAG .                      this repository's example project
#   docker build -t REGISTRY/team:TAG --build-context project=/path/to/team-project .
# then name the image in the project's configs/kubeflow.yaml (runtime.container.image).
FROM python:3.10.13-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TF_USE_LEGACY_KERAS=1 \
    TF_CPP_MIN_LOG_LEVEL=3 \
    UV_NO_CACHE=1

# uv, pinned as in the Makefile; pip stays in the image (TFX installs user modules with it).
RUN python -m pip install --no-cache-dir uv==0.13.9

# Dependencies first, from the lock alone, so a code change does not reinstall them.
WORKDIR /conveyor
COPY requirements.lock ./
RUN uv pip sync --system requirements.lock

# Conveyor itself: a regular (not editable) install, so runs record its version.
COPY pyproject.toml README.md /tmp/conveyor/
COPY pipelines /tmp/conveyor/pipelines
COPY components /tmp/conveyor/components
RUN uv pip install --system --no-deps /tmp/conveyor && rm -rf /tmp/conveyor

# The project: by default this repository's example one; `--build-context project=DIR` replaces
# this stage with a team's project folder (its specs/, configs/, schemas/ and modules).
FROM scratch AS project
COPY conveyor.yaml /conveyor.yaml
COPY specs /specs
COPY configs /configs
COPY schemas /schemas

FROM base
# The project lives here; profiles name it in runtime.container.project_root. Every node finds
# it as the command line does ($CONVEYOR_PROJECT), and imports the team's modules from it.
COPY --from=project / /conveyor/
ENV CONVEYOR_PROJECT=/conveyor \
    PYTHONPATH=/conveyor
RUN cd / && python -c "import pipelines.builder.pipeline, components.trainer.run, components.data_gate.component" \
    && conveyor validate

# KubeflowV2DagRunner gives each container its command: Conveyor's entry point in front of TFX's.
CMD ["python", "-m", "pipelines.run.kubeflow_entrypoint", "--help"]
