"""`python -m garden.analyze perplexity` and `fill_mask` (garden.bertology.perplexity; issue 36
item 8).

A tiny random Hugging Face GPT-2 and BERT (with its pretraining heads), converted by
garden.convert, are scored on a text file through the command line: the causal perplexity and
the masked LM's pseudo-perplexity equal the same quantities computed here from the transformers
models themselves (torch, one masked copy per piece), to 1e-4 relative, with the same number of
pieces scored. A garden.train masked-LM pretraining run is scored as a masked LM, and a
converted encoder without pretraining heads is refused in one line saying why it is neither.
fill_mask gives transformers' fill-mask pipeline's top-5 pieces and probabilities (1e-5) at
every [MASK] of a line, two masks in a line included.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import write_hf_bert, write_hf_gpt2  # noqa: E402
from testing import pretrain_args, train_in_process  # noqa: E402

LINES = ["the movie was good , the plot was great .", "The film was DULL!",
         "good", "bad bad plot , movie was not great", "Ελληνικά 日本語 🙂 café ½",
         " ".join(["movie was good"] * 20)]
SEQ = 32


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """{"gpt2" | "bert" | "bert_no_heads": (transformers model, converted directory)} and the
    --input file."""
    from garden import convert

    root = tmp_path_factory.mktemp("perplexity")
    made = {"gpt2": (write_hf_gpt2(root / "hf_gpt2", seed=2, n_positions=64)[0],
                     root / "hf_gpt2")}
    for name, cls in (("bert", "BertForPreTraining"), ("bert_no_heads", "BertModel")):
        made[name] = (write_hf_bert(str(root / f"hf_{name}"), seed=3, model_cls=cls)["model"],
                      root / f"hf_{name}")
    out = {"sources": {name: source for name, (_, source) in made.items()}}
    for name, (model, source) in made.items():
        family = "gpt2" if name == "gpt2" else "bert"
        target = root / f"out_{name}"
        assert convert.main(["--source=huggingface", f"--model={family}", f"--input={source}",
                             f"--output={target}"]) == 0
        out[name] = (model, target)
    text = root / "held_out.txt"
    text.write_text("\n".join(LINES) + "\n\n", encoding="utf-8")
    return out, text


def _analyze(model_dir, text, report, capsys):
    from garden import analyze

    code = analyze.main(["perplexity", f"--model={model_dir}", f"--input={text}",
                         f"--output={report}", f"--max_seq_length={SEQ}"])
    return code, capsys.readouterr()


def _report(report):
    return json.loads((report / "perplexity.json").read_text())


def test_causal_perplexity_equals_transformers(converted, tmp_path, capsys):
    from garden import runs

    (model, out), text = converted[0]["gpt2"], converted[1]
    code, _ = _analyze(out, text, tmp_path / "report", capsys)
    assert code == 0
    result = _report(tmp_path / "report")
    rows = runs.open(str(out), who="test").text.tokenizer().tokenize(LINES)
    nll, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            if len(row) < 2:
                continue
            ids = torch.tensor([row[:SEQ]])
            log_probs = torch.log_softmax(model(input_ids=ids).logits[0, :-1], dim=-1)
            nll -= float(log_probs.gather(1, ids[0, 1:, None]).sum())
            count += ids.shape[1] - 1
    assert result["measure"] == "perplexity (causal)"
    assert result["pieces_scored"] == count
    assert result["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-4)


def _hf_pseudo_perplexity(model, inputs, mask_id, specials):
    nll, count = 0.0, 0
    with torch.no_grad():
        for row in range(len(inputs["token_ids"])):
            for pos in range(inputs["token_ids"].shape[1]):
                token = int(inputs["token_ids"][row, pos])
                if not inputs["padding_mask"][row, pos] or token in specials:
                    continue
                ids = torch.tensor(inputs["token_ids"][row:row + 1], dtype=torch.long)
                ids[0, pos] = mask_id
                logits = model(input_ids=ids,
                               token_type_ids=torch.tensor(inputs["segment_ids"][row:row + 1],
                                                           dtype=torch.long),
                               attention_mask=torch.tensor(inputs["padding_mask"][row:row + 1],
                                                           dtype=torch.long)).prediction_logits
                nll -= float(torch.log_softmax(logits[0, pos], dim=-1)[token])
                count += 1
    return nll, count


def test_pseudo_perplexity_equals_transformers_masking_each_piece(converted, tmp_path, capsys):
    from garden import runs

    (model, out), text = converted[0]["bert"], converted[1]
    code, _ = _analyze(out, text, tmp_path / "report", capsys)
    assert code == 0
    result = _report(tmp_path / "report")
    run = runs.open(str(out), who="test")
    packer = run.packer(SEQ)
    inputs = packer.encode_numpy(LINES)
    mask_id = run.tokens().index("[MASK]")
    nll, count = _hf_pseudo_perplexity(model, inputs, mask_id,
                                       {packer.cls_id, packer.sep_id, packer.pad_id})
    assert result["measure"] == "pseudo-perplexity (masked LM)"
    assert result["pieces_scored"] == count and result["lines"] == len(LINES)
    assert result["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-4)


def test_a_pretraining_run_is_scored_as_a_masked_lm(bert_data, tmp_path):
    from garden import runs
    from garden.bertology import perplexity

    model_dir = tmp_path / "run"
    train_in_process(pretrain_args(bert_data, model_dir, steps=2)[2:], str(model_dir), steps=2)
    result = perplexity.score_model(str(model_dir), LINES, SEQ)
    packer = runs.open(str(model_dir), who="test").packer(SEQ)
    inputs = packer.encode_numpy(LINES)
    real = (inputs["padding_mask"] == 1) & ~np.isin(inputs["token_ids"],
                                                    [packer.cls_id, packer.sep_id])
    assert result["measure"] == "pseudo-perplexity (masked LM)"
    assert result["pieces_scored"] == int(real.sum())
    assert math.isfinite(result["perplexity"]) and result["perplexity"] > 1


def test_an_encoder_without_pretraining_heads_is_refused_saying_why(converted, tmp_path,
                                                                    capsys):
    (_, out), text = converted[0]["bert_no_heads"], converted[1]
    code, captured = _analyze(out, text, tmp_path / "report", capsys)
    assert code == 2
    error = captured.err.strip().splitlines()
    assert len(error) == 1 and "Traceback" not in captured.err, captured.err
    assert "is neither a causal LM" in error[0] and "pretrainer.keras" in error[0], error
    assert not (tmp_path / "report" / "perplexity.json").exists()


MASKED = ["the movie was [MASK] .", "[MASK] plot , the film was [MASK] !", "The [MASK] WAS good",
          "Ελληνικά [MASK] 日本語 🙂 café"]


def test_fill_mask_equals_the_transformers_pipeline(converted, tmp_path, capsys):
    (_, out), text = converted[0]["bert"], tmp_path / "masked.txt"
    text.write_text("\n".join(MASKED) + "\n", encoding="utf-8")
    from garden import analyze

    assert analyze.main(["fill_mask", f"--model={out}", f"--input={text}", "--top_k=5",
                         f"--output={tmp_path / 'report'}"]) == 0
    result = json.loads((tmp_path / "report" / "fill_mask.json").read_text())
    source = str(converted[0]["sources"]["bert"])
    pipeline = transformers.pipeline(
        "fill-mask", model=transformers.AutoModelForMaskedLM.from_pretrained(source),
        tokenizer=transformers.AutoTokenizer.from_pretrained(source), top_k=5)
    assert [line["text"] for line in result["lines"]] == MASKED
    for line in result["lines"]:
        theirs = pipeline(line["text"])
        theirs = theirs if isinstance(theirs[0], list) else [theirs]  # one list per mask
        assert len(line["masks"]) == len(theirs) == line["text"].count("[MASK]")
        for ours_mask, their_mask in zip(line["masks"], theirs):
            assert [a["id"] for a in ours_mask] == [b["token"] for b in their_mask], line
            np.testing.assert_allclose([a["probability"] for a in ours_mask],
                                       [b["score"] for b in their_mask], atol=1e-5)


def test_fill_mask_refuses_a_line_without_a_mask(converted, tmp_path, capsys):
    (_, out), text = converted[0]["bert"], tmp_path / "plain.txt"
    text.write_text("the movie was [MASK] .\nno mask here\n", encoding="utf-8")
    from garden import analyze

    assert analyze.main(["fill_mask", f"--model={out}", f"--input={text}",
                         f"--output={tmp_path / 'report'}"]) == 2
    assert "--input line 2 holds no [MASK]" in capsys.readouterr().err
