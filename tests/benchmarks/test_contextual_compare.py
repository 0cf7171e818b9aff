"""contextual_compare's CVT data: the unlabelled sentences leave out the sentences CVT is
scored on, and each seed's gain is paired with its own baselines; --contextuality's table
and plot (from synthetic analyses: no training here), and how bertology_report splices a
section into the report."""

from benchmarks.contextual_compare import cvt_gain, unlabeled_sentences


def _conll(sentences):
    return "-DOCSTART- -X- -X- O\n\n" + "\n\n".join(
        "\n".join(f"{w} -X- -X- {t}" for w, t in s) for s in sentences) + "\n"


def test_held_out_sentences_are_left_out(tmp_path):
    corpus = tmp_path / "corpus-0.txt"
    corpus.write_text("Use os.path.join to build a path.\n"
                      "Too short here\n"
                      "The ValueError is raised on bad input.\n"
                      "\n"
                      "Call asyncio.run(main) from the top level.\n", encoding="utf-8")
    dev = tmp_path / "dev.txt"
    dev.write_text(_conll([[("The", "O"), ("ValueError", "I-CODE"), ("is", "O"),
                            ("raised", "O"), ("on", "O"), ("bad", "O"), ("input", "O"),
                            (".", "O")]]), encoding="utf-8")
    every = unlabeled_sentences([str(corpus)], str(tmp_path / "all.txt"))
    kept = unlabeled_sentences([str(corpus)], str(tmp_path / "kept.txt"), str(dev))
    with open(every, encoding="utf-8") as f:
        assert [line.split()[0] for line in f] == ["Use", "The", "Call"]
    with open(kept, encoding="utf-8") as f:
        assert [line.split()[0] for line in f] == ["Use", "Call"]


def test_cvt_gain_pairs_each_seed_with_its_baselines():
    runs = {"cvt_tagging_few": {"eval_f1": 0.5}, "cvt_labels_only_few": {"eval_f1": 0.3},
            "cvt_labels_only_2x_few": {"eval_f1": 0.45},
            "cvt_tagging_few_seed43": {"eval_f1": 0.4},
            "cvt_labels_only_few_seed43": {"eval_f1": 0.35},
            "cvt_labels_only_2x_few_seed43": {"eval_f1": 0.42}}
    same_batches, same_updates = cvt_gain(runs)
    assert "labelled batches" in same_batches and "+0.200 +0.050" in same_batches
    assert "mean +0.125, sd 0.106, ahead in 2 of 2, paired t 1.67 at 1 df" in same_batches
    assert "as many updates" in same_updates and "+0.050 -0.020" in same_updates
    assert "ahead in 1 of 2" in same_updates


def test_cvt_gain_without_spread_has_no_t():
    runs = {f"{kind}_few{seed}": {"eval_f1": 0.0} for seed in ("", "_seed43")
            for kind in ("cvt_tagging", "cvt_labels_only", "cvt_labels_only_2x")}
    for line in cvt_gain(runs):
        assert "ahead in 0 of 2, sd 0: no t" in line


def _metrics(layers, start, causal=False):
    """Synthetic garden.bertology.contextuality output: value = start + layer / 100."""
    out = {key: [start + i / 100 for i in range(layers)] for key in (
        "self_similarity", "adjusted_self_similarity", "intra_sentence_similarity",
        "adjusted_intra_sentence_similarity", "max_explainable_variance",
        "adjusted_max_explainable_variance", "anisotropy_mev")}
    out["anisotropy"] = [0.5] * layers
    if causal:
        out["whole_sentence_intra_sentence_similarity"] = [0.9] * layers
    return out


def _result():
    return {"budget": {"steps": 3, "batch_size": 2, "seq_length": 8, "tokens": 48},
            "sentences": 10, "contextuality": {"elmo": _metrics(3, 0.1),
                                               "gpt2": _metrics(3, 0.3, causal=True),
                                               "minilm": _metrics(7, 0.6)}}


def test_contextuality_table_has_a_column_per_layer_and_gpt2_whole_sentence_rows():
    from benchmarks.contextual_compare import contextuality_table

    rows = contextuality_table(_result()).split("\n")
    assert rows[0] == "| measure | model | L0 | L1 | L2 | L3 | L4 | L5 | L6 |"
    # The 3-layer ELMo leaves L3..L6 empty; MiniLM fills all seven.
    assert "| self similarity | ELMo (tiny) | 0.10 | 0.11 | 0.12 |  |  |  |  |" in rows
    assert ("| self similarity | all-MiniLM-L6-v2 | 0.60 | 0.61 | 0.62 | 0.63 | 0.64 | 0.65 "
            "| 0.66 |") in rows
    # GPT-2's whole-sentence figure, raw and less the anisotropy baseline (0.9 - 0.5).
    assert ("| intra sentence similarity (whole sentence) | GPT-2 (tiny) | 0.90 | 0.90 | "
            "0.90 |  |  |  |  |") in rows
    assert ("| adjusted intra sentence similarity (whole sentence) | GPT-2 (tiny) | 0.40 | "
            "0.40 | 0.40 |  |  |  |  |") in rows
    assert not any("whole sentence" in r and "ELMo" in r for r in rows)
    assert sum("| anisotropy |" in r for r in rows) == 3


def test_contextuality_plot_writes_a_png(tmp_path):
    from benchmarks.contextual_compare import contextuality_plot

    path = contextuality_plot(_result(), str(tmp_path / "figures" / "families.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_report_section_replaces_its_block_or_follows_its_anchor():
    from benchmarks.bertology_report import Section, splice

    text = "# R\n\nintro\n\n## A\n\na\n\n## Old\n\nold text\n\n## B\n\nb\n"
    new = Section("x", "Old", "A", None)
    assert splice(text, [(new, ["new text"])]) == (
        "# R\n\nintro\n\n## A\n\na\n\n## Old\n\nnew text\n\n## B\n\nb\n")
    after_a = Section("y", "New", "A", None)
    assert splice(text, [(after_a, ["n"]), None]) == (
        "# R\n\nintro\n\n## A\n\na\n\n## New\n\nn\n\n## Old\n\nold text\n\n## B\n\nb\n")
    at_end = Section("z", "Last", "Missing", None)
    assert splice(text, [(at_end, ["z"])]).endswith("## B\n\nb\n\n## Last\n\nz\n")
