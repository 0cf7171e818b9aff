"""contextual_compare's CVT data: the unlabelled sentences leave out the sentences CVT is
scored on."""

from benchmarks.contextual_compare import unlabeled_sentences


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
