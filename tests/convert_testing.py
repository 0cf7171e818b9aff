"""Helpers for the weight-import parity tests: reference models built here, never downloaded.

torch and transformers are imported lazily (they are the optional bench extra).
"""

from __future__ import annotations

import json
import os
import re
from typing import Dict

import numpy as np


def max_abs_diff(a, b) -> float:
    """max |a - b| over all elements, after casting both to float64 numpy arrays."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    assert a.shape == b.shape, f"shapes differ: {a.shape} vs {b.shape}"
    return float(np.max(np.abs(a - b)))


def torch_state_dict_to_numpy(model) -> Dict[str, np.ndarray]:
    """A torch module's state dict as numpy float32 arrays (tied tensors appear under each
    of their names, as in the state dict)."""
    return {k: v.detach().cpu().float().numpy() if v.is_floating_point() else v.cpu().numpy()
            for k, v in model.state_dict().items()}


def randomize_torch_(model, seed: int = 0, scale: float = 0.1):
    """Overwrites every float parameter: weights ~N(0, scale), LayerNorm weights ~1+N(0, 0.2).

    At the default 0.02 initialisation the pre-activations are so small that the exact and
    the tanh GELU (or a transposed small kernel) agree to ~1e-6 and a 1e-4 tolerance could not
    fail; these weights make every path of the network matter. Tied parameters stay tied
    (they are one Parameter).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if "LayerNorm.weight" in name or name.endswith("layer_norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(scale * noise)
    return model


def save_hf_dir(model, directory: str, safetensors: bool = True) -> str:
    """Writes a Hugging Face checkpoint directory offline: config.json + model.safetensors
    (save_pretrained drops tied duplicates), or config.json + pytorch_model.bin holding the
    full state dict (tied duplicates included, as older checkpoints have them).

    transformers 5 writes safetensors whatever safe_serialization says, so the .bin is
    written with torch.save, the way transformers 4 wrote it.
    """
    os.makedirs(directory, exist_ok=True)
    if safetensors:
        model.save_pretrained(directory)
    else:
        import torch

        model.config.save_pretrained(directory)
        torch.save(model.state_dict(), os.path.join(directory, "pytorch_model.bin"))
    return directory


def random_bert_inputs(batch: int, length: int, vocab_size: int, seed: int = 0,
                       num_predictions: int = 5):
    """Token ids, two segments, right padding of varying length, and masked positions.

    Row b has length - 3*b real tokens (so row 0 is unpadded and the others are padded);
    segment 1 starts halfway through the real tokens; masked positions are distinct real
    positions (never [CLS]), sorted.
    """
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, vocab_size, size=(batch, length)).astype("int32")
    padding_mask = np.zeros((batch, length), "int32")
    segment_ids = np.zeros((batch, length), "int32")
    positions = np.zeros((batch, num_predictions), "int32")
    for b in range(batch):
        real = max(num_predictions + 2, length - 3 * b)
        padding_mask[b, :real] = 1
        segment_ids[b, real // 2:real] = 1
        token_ids[b, real:] = 0
        positions[b] = np.sort(rng.choice(np.arange(1, real), num_predictions, replace=False))
    return {"token_ids": token_ids, "segment_ids": segment_ids,
            "padding_mask": padding_mask}, positions


# Original google-research/bert variable names for a Hugging Face BERT parameter, written out
# independently of garden/models/bert/conversion.py so that the TF1 test checks that table.
def hf_bert_to_tf1_name(name: str):
    """(TF1 variable name, transpose?) for a Hugging Face BertForPreTraining parameter, or
    None for a parameter TF1 does not store separately (the tied decoder)."""
    name = name[len("bert."):] if name.startswith("bert.") else name
    if name in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"):
        return None
    if name == "cls.seq_relationship.weight":
        return "cls/seq_relationship/output_weights", False  # [2, H] in both
    if name == "cls.seq_relationship.bias":
        return "cls/seq_relationship/output_bias", False
    if name == "cls.predictions.bias":
        return "cls/predictions/output_bias", False
    prefix = "" if name.startswith("cls.") else "bert/"
    tf_name = name.replace("encoder.layer.", "encoder/layer_").replace(".", "/")
    tf_name = tf_name.replace("LayerNorm/weight", "LayerNorm/gamma")
    tf_name = tf_name.replace("LayerNorm/bias", "LayerNorm/beta")
    tf_name = tf_name.replace("/weight", "/kernel")
    if tf_name.startswith("embeddings/") and tf_name.endswith("_embeddings/kernel"):
        tf_name = tf_name[:-len("/kernel")]
        return prefix + tf_name, False
    transpose = tf_name.endswith("/kernel")  # torch Linear [out, in] -> TF1 [in, out]
    return prefix + tf_name, transpose


def write_tf1_checkpoint(weights: Dict[str, np.ndarray], prefix: str, extra=()) -> str:
    """Writes a name-based TF1 checkpoint (what tf.compat.v1.train.Saver writes, as the
    original run_pretraining.py did) with one variable per (name, array); `extra` adds more
    (e.g. Adam slots). Returns the checkpoint prefix."""
    import tensorflow as tf

    items = list(weights.items()) + list(extra)
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(value, name=name) for name, value in items]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return saver.save(sess, prefix)


def hf_bert_to_tf1_weights(hf_weights: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    out = {}
    for name, value in hf_weights.items():
        mapped = hf_bert_to_tf1_name(name)
        if mapped is None or name.endswith("position_ids"):
            continue
        tf_name, transpose = mapped
        out[tf_name] = np.ascontiguousarray(value.T if transpose else value)
    return out


def torch_forward(model, inputs: Dict[str, np.ndarray], **flags):
    """Runs a Hugging Face torch model without gradients on one of our input dicts (token_ids,
    padding_mask and segment_ids when given), with every hidden state; `flags` go to the model
    (e.g. output_attentions=True)."""
    import torch

    names = {"token_ids": "input_ids", "segment_ids": "token_type_ids",
             "padding_mask": "attention_mask"}
    kwargs = {names[k]: torch.tensor(v, dtype=torch.long) for k, v in inputs.items() if k in names}
    with torch.no_grad():
        return model(**kwargs, output_hidden_states=True, **flags)


def hf_sequence_and_logits(model, token_ids, padding_mask):
    """A Hugging Face *ForMaskedLM's last hidden state and logits as numpy arrays."""
    out = torch_forward(model, {"token_ids": token_ids, "padding_mask": padding_mask})
    return out.hidden_states[-1].numpy(), out.logits.numpy()


def garden_block_to_tf1(scope: str, attention: str, tables: Dict[str, str], rest: str, value):
    """Inverse name map of one garden TransformerEncoderBlock weight for a TF1 checkpoint.

    rest: the path below transformer_layer_i/ (e.g. "attention/query/kernel"); attention: the
    TF1 attention scope ("attention" in BERT / ELECTRA, "attention_1" in ALBERT); tables: our
    LayerNorm / dense layer name -> TF1 scope for the rest. Returns (TF1 name, TF1 array):
    the per-head [H, A, d] / [A, d] tensors flattened to TF1's [H, H] / [H].
    """
    m = re.fullmatch(r"attention/(query|key|value)/(kernel|bias)", rest)
    if m:
        flat = value.reshape(value.shape[0], -1) if m.group(2) == "kernel" else value.reshape(-1)
        return f"{scope}{attention}/self/{m.group(1)}/{m.group(2)}", flat
    if rest == "attention/attention_output/kernel":
        return f"{scope}{attention}/output/dense/kernel", value.reshape(-1, value.shape[-1])
    if rest == "attention/attention_output/bias":
        return f"{scope}{attention}/output/dense/bias", value
    layer, kind = rest.split("/")
    return f"{scope}{tables[layer]}/{kind}", value


def convert_tf1_with_cli(family: str, prefix: str, config: str, out, *flags):
    """Runs `python -m garden.convert --source=tf1 [flags]` as a user would (fresh process) and
    loads the pretrainer.keras it wrote to `out`."""
    import keras

    from testing import run_tool

    run_tool("garden.convert", "--source=tf1", f"--model={family}", f"--input={prefix}",
             f"--config={config}", f"--output={out}", *flags)
    return keras.models.load_model(os.path.join(out, "pretrainer.keras"))


def assert_refused(convert, config, weights: Dict[str, np.ndarray], match: str,
                   drop=(), put: Dict[str, np.ndarray] | None = None) -> None:
    """`convert(config, weights)` with the names in `drop` removed and `put` added or replaced
    must raise a ValueError whose message matches `match` (the offending name, for the user)."""
    import pytest

    bad = {k: v for k, v in weights.items() if k not in set(drop)}
    bad.update(put or {})
    with pytest.raises(ValueError, match=match):
        convert(config, bad)


def assert_sequence_parity(backbone, hf_sequence, token_ids, padding_mask, tol: float = 1e-4):
    """Our backbone's sequence_output equals the reference's on the real (unpadded) positions."""
    ours = backbone({"token_ids": token_ids, "padding_mask": padding_mask}, training=False)
    real = padding_mask.astype(bool)
    assert max_abs_diff(ours["sequence_output"].numpy()[real], hf_sequence[real]) <= tol


def assert_mlm_parity(pretrainer, hf_logits, token_ids, padding_mask, positions,
                      tol: float = 1e-4):
    """Our pretrainer's mlm_logits at `positions` equal the reference's full-sequence logits
    gathered at the same positions."""
    ours = pretrainer({"token_ids": token_ids, "padding_mask": padding_mask,
                       "masked_lm_positions": positions}, training=False)["mlm_logits"]
    assert max_abs_diff(ours, np.take_along_axis(hf_logits, positions[..., None], 1)) <= tol


def convert_masked_lm(from_huggingface, reference, backbone_class, pretrainer_class) -> Dict:
    """from_huggingface of a (config, *ForMaskedLM) reference's config and state dict, asserted
    to give a backbone_class backbone and a pretrainer_class pretrainer; the converted dict."""
    config, model = reference
    models = from_huggingface(config.to_dict(), torch_state_dict_to_numpy(model))
    assert isinstance(models["backbone"], backbone_class)
    assert isinstance(models["pretrainer"], pretrainer_class)
    return models


def assert_masked_lm_parity(models, hf_model, inputs):
    """A converted {"backbone", "pretrainer"} against the Hugging Face *ForMaskedLM it came
    from, on inputs = (token_ids, padding_mask, positions): assert_sequence_parity of the
    backbone and assert_mlm_parity of the pretrainer. Returns the reference's (sequence, logits)."""
    token_ids, padding_mask, positions = inputs
    hf_sequence, hf_logits = hf_sequence_and_logits(hf_model, token_ids, padding_mask)
    assert_sequence_parity(models["backbone"], hf_sequence, token_ids, padding_mask)
    assert_mlm_parity(models["pretrainer"], hf_logits, token_ids, padding_mask, positions)
    return hf_sequence, hf_logits


# --- converted checkpoints as fine-tuning starting points (tests/garden/test_converted_checkpoints.py)

WORDS = ("the a an this that it i you we movie film plot acting music story was is were "
         "good great fine fun bad awful boring dull very not and but so really quite liked "
         "loved hated enjoyed play ##s ##ing ##ed ##ly . , ! ? ' code port what").split()
CASED_WORDS = "The A This It I We Movie Film Good Bad Not Very Paris London".split()


def bert_vocab_tokens(cased: bool = False):
    """A vocab.txt in Google's layout: [PAD]=0, [unused0..98], [UNK]=100, [CLS]=101,
    [SEP]=102, [MASK]=103, then the words (a cased vocabulary adds capitalised ones)."""
    return (["[PAD]"] + [f"[unused{i}]" for i in range(99)] +
            ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(WORDS) +
            (list(CASED_WORDS) if cased else []))


def write_hf_bert(directory: str, cased: bool = False, seed: int = 0, hidden: int = 32,
                  layers: int = 2, heads: int = 4, model_cls: str = "BertModel") -> Dict:
    """A tiny random Hugging Face BERT directory with its tokenizer files (vocab.txt,
    tokenizer_config.json do_lower_case), written offline; returns {"dir", "model", "vocab"}."""
    import torch
    import transformers

    tokens = bert_vocab_tokens(cased)
    config = transformers.BertConfig(
        vocab_size=len(tokens), hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=2 * hidden, max_position_embeddings=128,
        type_vocab_size=2, hidden_act="gelu")
    torch.manual_seed(seed)
    model = randomize_torch_(getattr(transformers, model_cls)(config).eval(), seed=seed,
                             scale=0.05)
    save_hf_dir(model, directory)
    vocab = os.path.join(directory, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    import json

    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": not cased, "tokenizer_class": "BertTokenizer"}, f)
    return {"dir": directory, "model": model, "vocab": vocab}


def convert_hf_bert(root, seed: int = 0) -> Dict:
    """write_hf_bert into root/hf, converted by garden.convert (in process) into root/converted;
    write_hf_bert's dict with "out" (the converted directory, a pathlib.Path)."""
    from garden import convert

    src = write_hf_bert(str(root / "hf"), seed=seed)
    out = root / "converted"
    assert convert.main(["--source=huggingface", "--model=bert", f"--input={src['dir']}",
                         f"--output={out}"]) == 0
    return dict(src, out=out)


def write_bpe_tokenizer(directory: str, gpt2: bool = False) -> int:
    """RoBERTa's byte-level BPE files offline: vocab.json (<s>=0 <pad>=1 </s>=2 <unk>=3, the 256
    byte symbols, a few merges' pieces, <mask> last) and merges.txt; returns the vocab size."""
    import json

    from text.bpe import bytes_to_unicode

    pieces = ([] if gpt2 else ["<s>", "<pad>", "</s>", "<unk>"]) + \
        list(bytes_to_unicode().values())
    merges = []
    for word in ("the", "movie", "film", "was", "good", "bad", "plot", "great", "dull"):
        current = "\u0120"
        for ch in word:
            if f"{current} {ch}" not in merges:
                merges.append(f"{current} {ch}")
            current += ch
            if current not in pieces:
                pieces.append(current)
    pieces.append("<|endoftext|>" if gpt2 else "<mask>")  # GPT-2: its only special, last
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(pieces)}, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    return len(pieces)


def write_sentencepiece_model(path: str, vocab_size: int = 80) -> int:
    """ALBERT's spiece.model layout offline: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4."""
    import io

    import sentencepiece as spm

    text = [f"the {m} was {a} {b} ." for m in ("movie", "film", "plot", "story")
            for a in ("very", "really", "quite", "not") for b in ("good", "great", "bad", "dull")]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text * 4), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], hard_vocab_limit=False)
    with open(path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_file=path)
    return sp.get_piece_size()


# --- fine-tuning a converted directory: sample task files and garden.train arguments -----------

def classification_rows(rng, n):
    pos, neg = ["good", "great", "fun", "fine"], ["bad", "awful", "boring", "dull"]
    rows = ["text_a\tlabel"]
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        rows.append(f"the {rng.choice(['movie', 'film', 'plot', 'story'])} was "
                    f"{rng.choice(['very ', 'really ', ''])}"
                    f"{rng.choice(pos if label == 'pos' else neg)} .\t{label}")
    return "\n".join(rows) + "\n"


def squad_file(rng, n, prefix):
    paragraphs = []
    for i in range(n):
        value = rng.choice(["good", "great", "bad", "dull"])
        context = f"the movie was fine . the code is {value} . i liked it ."
        paragraphs.append({"context": context, "qas": [{
            "id": f"{prefix}{i}", "question": "what is the code ?", "is_impossible": False,
            "answers": [{"text": value, "answer_start": context.index("code is ") + 8}]}]})
    return {"version": "v1.1", "data": [{"title": prefix, "paragraphs": paragraphs}]}


def conll_text(rng, n):
    lines = []
    for _ in range(n):
        city = rng.choice(["paris", "london"])
        lines += ["-DOCSTART- -X- -X- O", "", "i NN O O", "liked VB O O", f"{city} NNP O I-LOC",
                  ". . O O", ""]
    return "\n".join(lines) + "\n"


def swag_csv(rng, n):
    header = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
    rows = [header]
    for i in range(n):
        label = rng.randrange(4)
        endings = ["bad .", "dull .", "awful .", "boring ."]
        endings[label] = "good ."
        rows.append(f"v{i},{i},the movie was,the movie,was,gold,{','.join(endings)},{label}")
    return "\n".join(rows) + "\n"


def write_task_files(d, rng, tasks=("classification", "qa", "tagging", "multiple_choice")):
    """Train and dev files of the sample tasks in `d` (a pathlib.Path, created)."""
    d.mkdir()
    if "classification" in tasks:
        (d / "train.tsv").write_text(classification_rows(rng, 48))
        (d / "dev.tsv").write_text(classification_rows(rng, 16))
    if "qa" in tasks:
        (d / "train.json").write_text(json.dumps(squad_file(rng, 24, "train")))
        (d / "dev.json").write_text(json.dumps(squad_file(rng, 8, "dev")))
    if "tagging" in tasks:
        (d / "train.conll").write_text(conll_text(rng, 24))
        (d / "dev.conll").write_text(conll_text(rng, 8))
    if "multiple_choice" in tasks:
        (d / "train.csv").write_text(swag_csv(rng, 24))
        (d / "val.csv").write_text(swag_csv(rng, 8))
    return d


def train_args(config, out, model_dir, export_base, *extra, steps=3):
    return [f"--config={config}", f"--model_dir={model_dir}",
            f"--gin_param=INIT_CHECKPOINT='{out}'", f"--gin_param=TRAIN_STEPS={steps}",
            f"--gin_param=EXPORT_BASE={repr(str(export_base)) if export_base else None}",
            "--gin_param=train.global_batch_size=8", "--gin_param=train.warmup_steps=1",
            "--gin_param=train.log_every=1", *extra]


def task_files(data, task):
    return {"classification": [f"--gin_param=TRAIN_FILE='{data / 'train.tsv'}'",
                               f"--gin_param=EVAL_FILE='{data / 'dev.tsv'}'"],
            "qa": [f"--gin_param=TRAIN_FILE='{data / 'train.json'}'",
                   f"--gin_param=EVAL_FILE='{data / 'dev.json'}'",
                   "--gin_param=TRAIN_RECORDS=None"],
            "tagging": [f"--gin_param=TRAIN_DATA='{data / 'train.conll'}'",
                        f"--gin_param=EVAL_DATA='{data / 'dev.conll'}'",
                        "--gin_param=garden.Tagging.label_names=['O', 'I-LOC']"],
            "multiple_choice": [f"--gin_param=TRAIN_FILE='{data / 'train.csv'}'",
                                f"--gin_param=EVAL_FILE='{data / 'val.csv'}'"]}[task]


def step0_backbone(out, task_cls, **kwargs):
    """The backbone a fine-tuning task builds from the converted directory OUT, restored as the
    task restores it (no training); (task, backbone)."""
    import gin

    from garden.models import factory

    gin.clear_config()
    task = task_cls(backbone=factory.backbone, vocab=None, init_checkpoint=str(out),
                    **kwargs)
    task.prepare()
    _, objects = task.build_model()
    return task, objects["backbone"]


ANSWER_SNIPPET = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 - the tokenizer ops
r = tf.saved_model.load(sys.argv[1]).signatures["serving_default"](
    text_a=tf.constant(["the movie was good .", "the plot was awful ."]))
print(json.dumps([t.decode() for v in r.values() if v.dtype == tf.string
                  for t in v.numpy().reshape(-1)]))
"""


def finetune_classification_from(out, root, *extra) -> list:
    """Fine-tunes classification_tiny.gin from the converted directory OUT for 3 steps through
    garden.train (in process, the sample classification files under root/data), exports, and
    asks the export for two texts' labels in a fresh process; returns the labels."""
    import random

    from testing import train_in_process

    data = root / "data"
    if not data.exists():
        write_task_files(data, random.Random(0), ("classification",))
    model_dir = root / "finetune"
    summary = train_in_process(
        train_args("configs/finetune/classification_tiny.gin", out, model_dir, root / "export",
                   *task_files(data, "classification"), *extra),
        str(model_dir), "classification", 3)
    return export_answers(summary["export_dir"])


def openai_gpt2_weights(hf_weights):
    """Hugging Face GPT-2 weights (name -> array) under openai/gpt-2's TF variable names and
    shapes (models/<size>/model.ckpt)."""
    out = {}
    for name, value in hf_weights.items():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        if name == "lm_head.weight" or re.fullmatch(r"h\.\d+\.attn\.(masked_)?bias", name):
            continue
        if name in ("wte.weight", "wpe.weight"):
            out[f"model/{name[:3]}"] = value
            continue
        parts = name.split(".")
        kind = {"weight": "g" if "ln_" in name else "w", "bias": "b"}[parts[-1]]
        if parts[0] == "h":
            path = f"model/h{parts[1]}/" + "/".join(parts[2:-1])
        else:
            path = f"model/{parts[0]}"
        out[f"{path}/{kind}"] = value[None] if kind == "w" else value
    return out


def write_hf_gpt2(folder, seed: int, n_positions: int):
    """A tiny random Hugging Face GPT2LMHeadModel in `folder` (created) with OpenAI's kind of
    byte-level BPE vocabulary (no <s> </s> <pad>, <|endoftext|> last); (model, vocab size)."""
    import torch
    import transformers

    os.makedirs(str(folder))
    vocab = write_bpe_tokenizer(str(folder), gpt2=True)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=n_positions,
        bos_token_id=vocab - 1, eos_token_id=vocab - 1)).eval()
    model = randomize_torch_(model, seed=seed, scale=0.05)
    save_hf_dir(model, str(folder))
    return model, vocab


def scratch_classification_args(root, model_dir, steps: int, *extra) -> list:
    """garden.train arguments of classification_tiny.gin trained from scratch (no
    INIT_CHECKPOINT) on the sample classification files under root/data with an uncased
    WordPiece root/vocab.txt (both written once), batch 8, exporting to root/export."""
    import random

    data, vocab = root / "data", root / "vocab.txt"
    if not data.exists():
        write_task_files(data, random.Random(0), ("classification",))
        vocab.write_text("\n".join(bert_vocab_tokens()) + "\n")
    return ["--config=configs/finetune/classification_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=VOCAB='{vocab}'", "--gin_param=INIT_CHECKPOINT=None",
            f"--gin_param=EXPORT_BASE='{root / 'export'}'", f"--gin_param=TRAIN_STEPS={steps}",
            "--gin_param=train.global_batch_size=8", "--gin_param=train.warmup_steps=1",
            *task_files(data, "classification"), *extra]


def train_scratch_classifier(root, config: str, steps: int, *extra) -> Dict:
    """garden.train (in process) of the classification config `config` for `steps` steps on
    scratch_classification_args' files under root, into root/run; the run's summary."""
    from testing import train_in_process

    model_dir = root / "run"
    args = scratch_classification_args(root, model_dir, steps, *extra)
    args[0] = f"--config={config}"
    return train_in_process(args, str(model_dir), "classification", steps)


def export_answers(export_dir) -> list:
    """The strings an exported classifier answers ANSWER_SNIPPET's two raw texts with, asked
    in a fresh process (TensorFlow alone imported: testing.run_code)."""
    from testing import run_code

    proc = run_code(ANSWER_SNIPPET, export_dir)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_classifier_learns_and_serves(summary):
    """A classification run's summary: the logged loss fell, dev accuracy beat the majority
    baseline, and the export labels raw text with the task's labels (pos/neg)."""
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    assert last["loss"] < first["loss"], (first, last)
    assert summary["eval_accuracy"] > summary["majority_baseline_accuracy"], summary
    assert set(export_answers(summary["export_dir"])) <= {"pos", "neg"}


TAGS_SNIPPET = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 - the tokenizer ops of the export
r = tf.saved_model.load(sys.argv[1]).signatures["serving_default"](
    sentences=tf.constant(["i liked paris .", "we loved london ."]))
print(json.dumps({k: sorted({t.decode() for t in v.numpy().reshape(-1)})
                  for k, v in r.items() if v.dtype == tf.string}))
"""


def tagger_answer(export_dir) -> dict:
    """A tagging export's string outputs (entity_type, entity_text, ...) for two sample
    sentences, asked in a fresh process (testing.run_code): {output name: sorted distinct
    values}."""
    from testing import run_code

    proc = run_code(TAGS_SNIPPET, str(export_dir))
    return json.loads(proc.stdout.strip().splitlines()[-1])
