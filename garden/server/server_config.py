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

It is parsed with google.protobuf.text_format against the messages of that .proto (field
numbers as there: ModelConfig name 1, base_path 2, model_type 3, model_platform 4,
model_version_policy 7, version_labels 8; ServableVersionPolicy latest 100 {num_versions 1},
all 101, specific 102 {versions 1}; ModelConfigList.config 1; ModelServerConfig
model_config_list 1). tensorflow-serving-api is not a dependency (it pins its own TensorFlow),
so the messages are built here in a private descriptor pool. The parse is strict: a misspelt
or unsupported field (logging_config, custom_model_config) is an error naming the file and
line, never silently ignored.
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


_MESSAGES = None


def _messages():
    """The model_server_config.proto messages garden.serve reads, in a private pool."""
    global _MESSAGES
    if _MESSAGES is not None:
        return _MESSAGES
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="garden/tensorflow_serving_config_subset.proto",
                                           package="tensorflow.serving", syntax="proto3")
    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED

    def fields(message, specs):
        for name, number, ftype, type_name, label in specs:
            fd = message.field.add(name=name, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = ".tensorflow.serving." + type_name

    enum = f.enum_type.add(name="ModelType")
    for i, name in enumerate(("MODEL_TYPE_UNSPECIFIED", "TENSORFLOW", "OTHER")):
        enum.value.add(name=name, number=i)
    policy = f.message_type.add(name="ServableVersionPolicy")
    fields(policy.nested_type.add(name="Latest"), [("num_versions", 1, F.TYPE_UINT32, None, opt)])
    policy.nested_type.add(name="All")
    fields(policy.nested_type.add(name="Specific"), [("versions", 1, F.TYPE_INT64, None, rep)])
    policy.oneof_decl.add(name="policy_choice")
    fields(policy, [("latest", 100, F.TYPE_MESSAGE, "ServableVersionPolicy.Latest", opt),
                    ("all", 101, F.TYPE_MESSAGE, "ServableVersionPolicy.All", opt),
                    ("specific", 102, F.TYPE_MESSAGE, "ServableVersionPolicy.Specific", opt)])
    for field in policy.field:
        field.oneof_index = 0
    model = f.message_type.add(name="ModelConfig")
    labels = model.nested_type.add(name="VersionLabelsEntry")
    fields(labels, [("key", 1, F.TYPE_STRING, None, opt), ("value", 2, F.TYPE_INT64, None, opt)])
    labels.options.map_entry = True
    fields(model, [("name", 1, F.TYPE_STRING, None, opt),
                   ("base_path", 2, F.TYPE_STRING, None, opt),
                   ("model_type", 3, F.TYPE_ENUM, "ModelType", opt),
                   ("model_platform", 4, F.TYPE_STRING, None, opt),
                   ("model_version_policy", 7, F.TYPE_MESSAGE, "ServableVersionPolicy", opt),
                   ("version_labels", 8, F.TYPE_MESSAGE, "ModelConfig.VersionLabelsEntry", rep)])
    fields(f.message_type.add(name="ModelConfigList"),
           [("config", 1, F.TYPE_MESSAGE, "ModelConfig", rep)])
    server = f.message_type.add(name="ModelServerConfig")
    fields(server, [("model_config_list", 1, F.TYPE_MESSAGE, "ModelConfigList", opt)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    _MESSAGES = {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving." + name))
        for name in ("ModelServerConfig", "ModelConfig")}
    return _MESSAGES


def _from_proto(config, where: str) -> ModelConfig:
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

    message = _messages()["ModelServerConfig"]()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as e:
        raise ConfigError(f"{path}: {e} (garden.serve reads model_config_list {{ config {{ name, "
                          f"base_path, model_platform, model_version_policy, version_labels "
                          f"}} }})") from None
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
    config = _messages()["ModelConfig"](name=model_name or "default", base_path=model_base_path)
    return [_from_proto(config, "--model_name/--model_base_path")]
