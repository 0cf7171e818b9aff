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
and optionally:
    examples_columns(examples, tokenizer, options, first_index=0, on_error=None)
                                            the records of many examples at once as int64
                                            columns {name: [N, length]} (one batched tokenizer
                                            call; serialized without per-record dicts), as
                                            squad.py has; make_finetune prefers it
    examples_features(...)                  the same as lists of record dicts
    examples_records(...) -> [(example index, record index, bytes)]
                                            the serialized records (the stored form) directly,
                                            as squad.py has; make_finetune prefers it
    to_records(columns) -> columns          the stored form of examples_columns' columns, when
                                            it differs (squad: character spans plus one);
                                            the kind's parse_record(serialized, options) undoes it
    read_tfds(name, split, data_dir) -> list
                                            the examples of a prepared tensorflow-datasets
                                            split (``split`` may be "train[3shard]"), for
                                            --input=tfds:NAME[/CONFIG][:SPLIT]
example_features may take ``example_index=`` (make_finetune passes the example's index in the
input when it does, and otherwise sets a record's "example_index" feature itself). A
FinetuneDataError from read_examples / read_tfds ends the job with its message; one from
example_features skips that example and is counted.
"""


class FinetuneDataError(ValueError):
    """A fine-tuning data file is missing or malformed; the message names file and line/record."""
