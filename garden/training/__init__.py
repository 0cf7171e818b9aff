"""The pieces garden.train composes: the step (step.py), checkpoints + resume + preemption
(checkpoints.py), logging + progress + TensorBoard + MFU (progress.py), evaluation and the
summary (report.py), the checks run before training (setup.py), gradual magnitude pruning
(pruning.py)."""
