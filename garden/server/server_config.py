"""Which models garden.serve serves: TF Serving's --model_config_file text proto, or the
--model_name/--model_base_path pair, as plain `ModelConfig` records.

The file is the model server's own format (tensorflow_serving/config/model_server_config.proto):

    model_config_list {
      config {
        name: "sentiment"
        base_path: "/exports/sentiment"
        model_platform: "tensorflow"
        model_version_policy { specific { versions: 1 versions: 2 } }   # or latest {} / all {}
        version_labels { key: "stable" value: 1 }
        version_labels { key: "canary" value: 2 }
      }
    }

It is parsed with google.protobuf.text_format into that .proto's own generated message
(tensorflow_serving.config.model_server_config_pb2.ModelServerConfig, from the
tensorflow-serving-api wheel, which loads no TensorFlow). The parse is strict: a misspelt field
is an error naming the file and line, and a field of the proto that garden.serve does not act
on (custom_model_config, logging_config) is an error naming the file and the model, never
silently ignored.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

POLICIES = ("latest", "all", "specific")


class ConfigError(ValueError):
    """The model flags or the model config file are not something garden.serve can serve."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One served model. policy: "latest" (the `num_versions` highest versions), "all", or
    "specific" (exactly `versions`). labels: version label -> version number."""

    name: str
    base_path: str
    policy: str = "latest"
    num_versions: int = 1
    versions: Tuple[int, ...] = ()
    labels: Tuple[Tuple[str, int], ...] = ()

    def wanted(self, on_disk: List[int]) -> List[int]:
        """The versions this policy serves out of those present on disk (sorted)."""
        on_disk = sorted(on_disk)
        if self.policy == "all":
            return on_disk
        if self.policy == "specific":
            return [v for v in on_disk if v in self.versions]
        return on_disk[-self.num_versions:] if on_disk else []

    @property
    def label_map(self) -> Dict[str, int]:
        return dict(self.labels)


# The fields of ModelConfig acted on (model_type: deprecated by TF Serving, read and ignored).
_READ_FIELDS = ("name", "base_path", "model_type", "model_platform", "model_version_policy",
                "version_labels")


def _from_proto(config, where: str) -> ModelConfig:
    ignored = sorted(f.name for f, _ in config.ListFields() if f.name not in _READ_FIELDS)
    if ignored:
        raise ConfigError(f"{where}: {', '.join(ignored)} of model {config.name!r}: garden.serve "
                          f"does not act on it (it reads {', '.join(_READ_FIELDS)})")
    if not config.name or "/" in config.name:
        raise ConfigError(f"{where}: name {config.name!r} must be a non-empty name without '/'")
    if not config.base_path:
        raise ConfigError(f"{where}: base_path is missing for model {config.name!r}")
    if config.model_platform not in ("", "tensorflow"):
        raise ConfigError(f"{where}: model_platform {config.model_platform!r} for model "
                          f"{config.name!r}: garden.serve serves \"tensorflow\" SavedModels only")
    policy = config.model_version_policy.WhichOneof("policy_choice") or "latest"
    num_versions = config.model_version_policy.latest.num_versions or 1
    versions = tuple(sorted(set(config.model_version_policy.specific.versions)))
    if policy == "specific" and not versions:
        raise ConfigError(f"{where}: model {config.name!r}: specific {{}} needs at least one "
                          f"`versions: N`")
    labels = tuple(sorted(config.version_labels.items()))
    if policy == "specific":
        stray = [f"{k} -> {v}" for k, v in labels if v not in versions]
        if stray:
            raise ConfigError(f"{where}: model {config.name!r}: version_labels {stray} point at "
                              f"versions the policy does not serve ({list(versions)})")
    return ModelConfig(name=config.name, base_path=config.base_path, policy=policy,
                       num_versions=num_versions, versions=versions, labels=labels)


def parse_model_config(text: str, path: str = "<model_config>") -> List[ModelConfig]:
    """The ModelConfig records of a ModelServerConfig text proto (see the module docstring)."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    message = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as e:
        raise ConfigError(f"{path}: {e} (garden.serve reads model_config_list {{ config {{ name, "
                          f"base_path, model_platform, model_version_policy, version_labels "
                          f"}} }})") from None
    if message.HasField("custom_model_config"):
        raise ConfigError(f"{path}: custom_model_config: garden.serve reads model_config_list "
                          f"{{ config {{ ... }} }} only")
    configs = [_from_proto(c, f"{path}: config {i + 1}")
               for i, c in enumerate(message.model_config_list.config)]
    if not configs:
        raise ConfigError(f"{path}: no model_config_list {{ config {{ ... }} }} entry")
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{path}: model name(s) {duplicates} appear more than once")
    return configs


def model_configs(model_name: Optional[str], model_base_path: Optional[str],
                  model_config_file: Optional[str]) -> List[ModelConfig]:
    """The served models from TF Serving's flags: a config file, or a name and a base path."""
    if model_config_file:
        if model_base_path:
            raise ConfigError("--model_config_file and --model_base_path are exclusive (as in "
                              "tensorflow_model_server): give the base paths in the file")
        try:
            with open(model_config_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"--model_config_file={model_config_file}: {e.strerror}") from None
        return parse_model_config(text, model_config_file)
    if not model_base_path:
        raise ConfigError("give --model_base_path=DIR (with --model_name=NAME) or "
                          "--model_config_file=FILE")
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelConfig(name=model_name or "default",
                                                 base_path=model_base_path)
    return [_from_proto(config, "--model_name/--model_base_path")]
