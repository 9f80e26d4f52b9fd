"""Experiments: one module per experiment, each registering itself with
@sluicebench.core.experiment."""
