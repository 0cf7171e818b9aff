"""The server side: garden.serve's re-implementation of TensorFlow Serving's REST and gRPC APIs
over the exports garden.serving writes, for local use and tests (production runs the real
tensorflow_model_server on the same directories; docs/tasks.md "Serving: garden.serve").

server.py (ModelManager: versions, polling, warmup; RestApi: the REST routes), server_json.py
(REST bodies <-> arrays), grpc_server.py (PredictionService and ModelService, on
tensorflow-serving-api's generated messages and servicers), server_config.py (the served models
from the model server's flags or its --model_config_file). The CLI is garden/serve.py."""
