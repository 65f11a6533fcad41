# inferd's image, for KServe, ModelMesh, Seldon Core, Ray and plain Kubernetes.
#
#   docker build -t inferd .                                      # sklearn, xgboost, lightgbm, mlflow
#   docker build -t inferd --build-arg EXTRAS=sklearn,onnx .      # the frameworks you serve
#   docker run -p 8080:8080 -p 8081:8081 -v $PWD/models:/mnt/models:ro inferd
#
# No model is in the image: `inferd start` serves $MLSERVER_MODELS_DIR (/mnt/models),
# where KServe's storage initializer puts the model, or a volume you mount.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
# The extras KServe's MLServer runtime serves by default; add onnx for ONNX models.
ARG EXTRAS=sklearn,xgboost,lightgbm,mlflow
WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/inferd \
    && /opt/inferd/bin/pip install --no-cache-dir ".[${EXTRAS}]"

FROM ${PYTHON_IMAGE}
# OpenMP, which XGBoost and LightGBM load.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/inferd /opt/inferd
ENV PATH=/opt/inferd/bin:$PATH \
    HOME=/home/inferd \
    PYTHONUNBUFFERED=1 \
    MLSERVER_MODELS_DIR=/mnt/models
# Group 0 owns what the server may write, with the owner's rights: platforms that
# run the image under a random UID in group 0 (OpenShift) can write there too.
RUN mkdir -p /home/inferd /mnt/models \
    && chown -R 1000:0 /home/inferd /mnt/models \
    && chmod -R g=u /home/inferd /mnt/models
USER 1000
WORKDIR /home/inferd
# REST, gRPC, metrics.
EXPOSE 8080 8081 8082
# Exec form: inferd is PID 1 and gets SIGTERM itself, so it drains before exiting.
CMD ["inferd", "start"]
