"""Small learnable fine-tuning tasks in the official formats, made from the sample corpus
without downloads: `python -m data_pipelines.sample_tasks --output=DIR` (see __main__.py)."""
