"""Fine-tuning data in the official formats of the tasks the BERT family was judged on.

One module per task kind (docs/tasks.md):
    glue.py    GLUE TSVs: the nine tasks' column layouts and label sets (classification and
               STS-B regression); MNLI matched and mismatched
    swag.py    SWAG CSV (four-way multiple choice)
    squad.py   SQuAD v1.1 / v2.0 JSON; windowed features for extractive QA
    conll.py   CoNLL-2003 (IOB1 as distributed, IOB2 accepted); first-sub-token labels

Readers raise FinetuneDataError naming the file and the line (or record) of a bad row; they
never convert a value of the wrong type into a string or a class.

A kind that `python -m data_pipelines.make_finetune` writes (squad, conll) is a module with:
    NAME                                    the --task value
    add_flags(parser)                       its own flags (with documented defaults)
    options_from_flags(args) -> options     a frozen dataclass of those flags
    read_examples(path) -> list             the examples of one file, in file order
    example_features(example, tokenizer, options) -> list of dict
                                            one dict per TFRecord (windows, sentence pieces):
                                            name -> int | list of int | bytes
    feature_spec(options) -> {name: tf.io.FixedLenFeature}
                                            what garden's tasks parse the records with
"""


class FinetuneDataError(ValueError):
    """A fine-tuning data file is missing or malformed; the message names file and line/record."""
