"""The official metrics of the fine-tuning tasks, one module per task kind, computed with
well-kept libraries (scikit-learn, scipy, seqeval) and, for SQuAD, equal to the official
evaluation scripts (docs/tasks.md)."""
