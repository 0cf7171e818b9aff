"""contextual_compare's CVT data: the unlabelled sentences leave out the sentences CVT is
scored on, and each seed's gain is paired with its own baselines."""

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
