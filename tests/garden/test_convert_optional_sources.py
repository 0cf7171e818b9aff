"""garden.convert on the runtime install: a source whose reader needs a package of the bench
extra (torch for pytorch_model.bin, tf-models-official for Model Garden checkpoints) ends in one
error line naming the package and the extra, not a ModuleNotFoundError traceback (issue 35
item 2). The package is made unimportable for the call, as it is on the runtime install."""

from __future__ import annotations

import json
import sys

import pytest

from garden import convert


class _Absent:
    """A meta-path finder that makes `name` (and its submodules) fail to import as an absent
    package does."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def without(monkeypatch):
    def hide(name):
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, module)
        monkeypatch.setattr(sys, "meta_path", [_Absent(name), *sys.meta_path])
    return hide


def _hf_bin_checkpoint(directory):
    config = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 7,
              "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 16, "max_position_embeddings": 16, "type_vocab_size": 2,
              "hidden_act": "gelu", "layer_norm_eps": 1e-12}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\na\n")
    (directory / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    (directory / "pytorch_model.bin").write_bytes(b"\0" * 64)
    return directory


def test_pytorch_weights_without_torch_name_the_bench_extra(tmp_path, without, capsys):
    source = _hf_bin_checkpoint(tmp_path)
    without("torch")
    rc = convert.main(["--source=huggingface", "--model=bert", f"--input={source}",
                       f"--output={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "torch (pytorch_model.bin weights)" in err[0] and "'.[bench]'" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_module_of_ours_missing_is_not_blamed_on_the_extra(tmp_path, without, capsys):
    """Only the readers' optional packages get the install hint; any other missing module is
    a defect and stays a traceback."""
    source = _hf_bin_checkpoint(tmp_path)
    without("safetensors")  # a runtime dependency, not an optional reader
    (source / "pytorch_model.bin").unlink()
    (source / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.raises(ModuleNotFoundError):
        convert.main(["--source=huggingface", "--model=bert", f"--input={source}",
                      f"--output={tmp_path / 'out'}"])
